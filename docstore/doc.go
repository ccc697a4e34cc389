// Package docstore is keepstate's embedded store: engine.Tables on a
// Clover v2 document database on Pebble (an LSM tree), persistent under
// one directory.
//
// Each table (Store.OpenTable) is a Clover collection, "t_<name>", with
// one document per key (table_doc.go), which Clover can read with its own
// API; the tables' index entries, members keys, claim epochs and
// checkpoints live beside Clover's keys (table_layout.go). Clover reads
// and writes through a store.Store bound to a Pebble snapshot or to one
// write batch (clover.go).
//
// A table's Apply writes its documents, their index entries and members
// keys, the collection size and the partition checkpoint as one Pebble
// batch after checking the claim epoch, or nothing; readers see whole
// batches. Live batches are synced (WithFsync), replay batches are not:
// the changelog restores what a power loss drops.
//
// The write path is tuned for the engine's loop of loading aggregates and
// writing them back: a write cache per table (table_cache.go, filled in
// the background at open by table_warm.go) lets Apply read nothing for
// cached keys and Load answer them from memory; documents are encoded as
// msgpack by hand; a restore into an empty table (the bulk load,
// table_bulk.go) reads nothing and is written out as sorted files that
// Pebble ingests; queries read O(limit) documents whatever the table's
// size (table_query.go).
//
// Open migrates the movie job's state from the movie layout of earlier
// versions into the table "movies" (migrate.go), and refuses a data
// directory holding only the old bbolt store (ErrOldStore). A file that
// fails its checksum condemns the store (ErrCorrupt, corrupt.go); writes
// fail with engine.ErrUnavailable while the volume has less free space
// than WithDiskReserve (diskguard.go). The directory is locked (flock)
// while a Store is open: a second process fails with ErrLocked.
package docstore
