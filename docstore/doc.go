// Package docstore is keepstate's embedded engine.Store: a Clover v2
// document database on Pebble (an LSM tree), persistent under one
// directory.
//
// Each movie is one Clover document in the "movies" collection, with an _id
// derived from the movie id (a canonical UUID whose hex digits are the id),
// and the fields movieId, partition, count, sum, avg, version, sources and
// rank. rank is a fixed-width string that sorts by average descending, then
// movie id ascending; Clover's index on it serves range queries, limits and
// cursors without reading documents outside the answer (Range runs Clover's
// query planner on the index). It is the only Clover index. DropPartition
// and ScanPartition use members keys instead: one per movie, partition
// first, written when the movie is new or moves partition, holding
// nothing else (format v3; an update rewrites the document and, when the
// average changed, the rank entry).
//
// Clover talks to its storage through store.Store; this package gives it
// one bound to a Pebble snapshot (reads) or to the batch of one Apply
// (writes), so every Clover call of a batch joins that batch: a batch's
// documents, their index entries, the partition checkpoint and the epoch
// check commit as one synced Pebble batch or not at all, and readers see
// whole batches. Writes go through docWriter, which writes Clover's own
// document and index formats without Clover's per-call overhead (tests pin
// both formats to Clover's code). Checkpoints, claim epochs, members and
// the format marker live in their own key namespaces of the same database.
//
// Apply does not read what its write cache (priorCache) knows: each
// movie's version, average and partition, kept after every commit, learned
// from Load and filled at Open from the documents. A replay batch into an empty store
// takes the bulk-load path (bulkLoad): no read at all, every key an append.
//
// Open does not read the store of the old format (v1, Clover on bbolt, the
// file keepstate.db): a data directory holding it and no Pebble store is
// refused with ErrOldStore (an ErrNotStore), the file left as it is;
// `keepstate reset` deletes it (RemoveOldStore), and the next start
// restores the state from the changelog.
//
// The same database holds tables (Store.OpenTable, engine.Tables): one
// Clover collection per table plus index entries, members keys, epochs and
// checkpoints of their own (see table_layout.go).
//
// With WithMovieMigration, Open moves the movies into the table "movies"
// (the movie job's table: avg index, ties ascending) and deletes the
// movie layout's keys, keeping checkpoints and claim epochs, crash-safe
// and resumable (see migrate.go).
//
// The directory is locked (flock) while a Store is open: a second process
// fails with ErrLocked, naming the directory and the holder's pid, within
// the lock timeout instead of waiting forever.
package docstore
