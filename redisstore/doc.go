// Package redisstore keeps engine tables (engine.Tables) on a Redis server
// (go-redis v9), shared by every keepstate instance: Open connects,
// OpenTable opens (or creates) a table, Close closes the connection pool
// and with it every table.
//
// # Key layout
//
// Every key lives under a prefix (WithPrefix, default "keepstate:"); on a
// single server or a Sentinel master a table's keys are under
// "<prefix>t:<table>:" (K below; on a cluster see Deployments):
//
//	K spec                     string: "1|<index>:<kind>,..." — the declared indexes, in
//	                           order, then ";ties-ascending" when the spec sets TiesAscending
//	K d:<hex of key>           hash: p (partition) v (version) s (sources "p:o,p:o")
//	                           d (value bytes) and 0..7 (the index values)
//	K i:<index>                sorted set, every score 0, members (value bytes)+key
//	K p:<p>:members            set of the raw keys of partition p's documents
//	K p:<p>:checkpoint         string: next changelog offset of p
//	K p:<p>:epoch              string: fencing epoch of p (INCR by Claim)
//	K p:<p>:batch              string: token of the last batch applied to p
//	K migrated, K migrating    strings: the movie table's migration marker and lock
//	<prefix><stream key>       stream: a table's change stream (WithTableStream)
//
// An index is one sorted set ordered by member bytes (ZRANGE BYLEX): 8
// order-preserving bytes of a number, or a string and 0x00, then the
// document key; a page of a query is one range and its hash reads in one
// read-only script (see table.go).
//
// # Writes
//
// A batch is one optimistic transaction (see runBatch): readers never see
// a part of it, a refused batch writes nothing, and a claim before its
// EXEC makes EXEC write nothing. Claim and DropPartition are scripts.
// Scripts and transactions name keys of one partition (and the table's
// indexes), so on a Redis Cluster each partition has a hash tag (below).
//
// A batch that finds, under its own epoch, another batch token than the
// last one this Store wrote (or sent without learning the outcome) is
// refused with engine.ErrFenced: Redis lost acknowledged writes (a
// failover to a replica that lacked them, a restart from a file that had
// not persisted them) and its checkpoint with them, so the engine claims
// the partition again and replays the changelog from there instead of
// writing on top of the hole (see writeLog).
//
// # Deployments
//
// WithMode chooses how Open reads its URL and which client it builds: one
// server (ModeSingle), a Redis Cluster (ModeCluster) or a master found
// through Sentinels (ModeSentinel); every table operation goes through
// redis.UniversalClient. On a cluster a table's keys carry one hash tag
// per partition p, T = "{<prefix>t:<table>:<p>}:", so that everything one
// Apply touches is in one slot and a table's partitions spread over the
// masters:
//
//	T spec            the spec (as K spec), one copy per partition; Claim checks it
//	T d:<hex of key>  hash: a document of partition p (as K d:)
//	T i:<index>       sorted set: the index entries of partition p's documents
//	T members         set of the raw keys of partition p's documents
//	T checkpoint      string: next changelog offset of p
//	T epoch           string: fencing epoch of p
//	T batch           string: token of the last batch applied to p
//	T stream:<Key>    stream: partition p's share of the change stream
//
// Get and Load find a document's partition by engine.PartitionFor over
// engine.TableSpec.Partitions, so OpenTable refuses a table without
// Partitions (engine.ErrInvalid) and Apply a document whose key hashes to
// another partition. A query page runs the page script on every
// partition's index concurrently and merges the pages in the query's
// order (engine.TableSpec.Before); Reset SCANs every master. A table left
// by the layout that kept a whole table under one tag,
// "{<prefix>t:<table>}:...", is refused (ErrOldLayout) until
// RemoveOldLayout (keepstate reset) deletes it. What outlives go-redis's
// own redirections and retries (a master being replaced, a slot being
// migrated, CLUSTERDOWN, TRYAGAIN) is engine.ErrUnavailable, so the
// partition waits and retries.
//
// # Change stream
//
// WithTableStream gives a table a stream, <prefix><Key> (on a cluster T
// stream:<Key>), with one entry per document an Apply writes. The movie
// job's table writes <prefix>rating-averages-stream (movieId, avg, count).
//
// # Migration of the movie layout
//
// Earlier versions kept the movie job's aggregates in a layout of their
// own under the same prefix:
//
//	<prefix>movie:<id>                   hash: id count sum avg partition version sources rank
//	<prefix>by-avg                       sorted set of the movies by average
//	<prefix>partition:<p>:members        set of the movie ids of partition p
//	<prefix>partition:<p>:checkpoint     string: next changelog offset of p
//	<prefix>partition:<p>:epoch          string: fencing epoch of p
//	<prefix>partition:<p>:batch          string: token of the last applied batch of p
//	<prefix>rating-averages-stream       stream: movieId avg count of every new average
//
// OpenTable of the table "movies" with the movie job's spec converts
// whatever that layout left into the table first, once per prefix and
// never on a cluster (see migrate.go). Every instance of the old version
// must be stopped first.
//
// # Errors
//
// Transport errors and a server that cannot serve now (see transient) are
// wrapped with engine.ErrUnavailable; the go-redis client reconnects by
// itself, so the store works again once Redis is back.
package redisstore
