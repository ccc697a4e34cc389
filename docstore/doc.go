// Package docstore is keepstate's embedded engine.Store: a Clover v2
// document database on bbolt, persistent under one directory.
//
// Each movie is one Clover document in the "movies" collection, with an _id
// derived from the movie id (a canonical UUID whose hex digits are the id),
// and the fields movieId, partition, count, sum, avg, version, sources and
// rank. rank is a fixed-width string that sorts by average descending, then
// movie id ascending; Clover's index on it serves range queries, limits and
// cursors without reading documents outside the answer. It is the only
// Clover index: every index costs two key updates per document write.
// DropPartition and ScanPartition use a "members" bucket instead (one key
// per movie, partition first), written only when a movie is new or moves.
//
// Clover has no public transactions. The store opens bbolt itself and hands
// Clover a store.Store bound to one bbolt transaction, so every Clover call
// of a batch joins that transaction: a batch's documents, their index
// entries and the partition checkpoint commit together or not at all.
// Checkpoints, claim epochs and the format marker live in their own bbolt
// buckets in the same file.
//
// The directory is locked while a Store is open: a second process fails with
// ErrLocked within the lock timeout instead of waiting forever.
package docstore
