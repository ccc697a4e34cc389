// Package redisstore is an engine.Store on a Redis server (go-redis v9),
// shared by every keepstate instance.
//
// Key layout, all under a prefix (WithPrefix, default "keepstate:"):
//
//	<prefix>movie:<id>                   hash: id count sum avg partition version sources rank
//	<prefix>by-avg                       sorted set, all scores 0, ordered by member (see below)
//	<prefix>partition:<p>:members        set of the movie ids of partition p
//	<prefix>partition:<p>:checkpoint     string: next changelog offset of p
//	<prefix>partition:<p>:epoch          string: fencing epoch of p (INCR by Claim)
//	<prefix>partition:<p>:batch          string: token of the last applied batch of p
//	<prefix>rating-averages-stream       stream: movieId avg count of every new average
//
// The by-avg members are "<16 hex: avg, descending><16 hex: id, ascending>:<id>",
// fixed width, so the lexicographic order of the set (ZRANGEBYLEX) is exactly
// average descending then movie id ascending, and a cursor is an exclusive
// lexicographic bound. sources is "p:o,p:o" sorted by partition.
//
// A batch (of movies or of a table) is applied by one optimistic
// transaction: WATCH on the partition's epoch, checkpoint and batch token,
// a pipelined read of the stored versions (and ranks or index values), the
// epoch and version checks in Go, then MULTI/EXEC of the hashes, the sorted
// sets, the partition set, the checkpoint and the stream entries. Readers
// never see a part of a batch, a refused batch writes nothing, and a claim
// or drop of the partition between the read and EXEC makes EXEC write
// nothing. (A Lua script did the same for 1.5× the server CPU.) Range
// queries run as a read-only script. The scripts and transactions name
// keys they derive from the prefix, so the store needs a standalone Redis
// (or one where all keys live on one node), not a Redis Cluster.
//
// Tables (OpenTable) live under "<prefix>t:<table>:" (see table.go). A
// table may have a change stream (WithTableStream), written in the same
// MULTI/EXEC as its batches. Opening the table "movies" with the movie
// job's spec migrates the layout above into it, once (see migrate.go);
// the movie job's stream option keeps <prefix>rating-averages-stream and
// its fields.
//
// Transport errors (connection refused or reset, timeouts, a loading or
// read-only server) are wrapped with engine.ErrUnavailable; the go-redis
// client reconnects by itself, so the store works again once Redis is back
// without being reopened.
package redisstore
