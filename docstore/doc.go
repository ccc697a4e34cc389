// Package docstore is keepstate's embedded store: engine.Tables on a
// Clover v2 document database on Pebble (an LSM tree), persistent under
// one directory.
//
// Each table (Store.OpenTable) is a Clover collection, "t_<name>", with
// one document per key: its _id is the key in hex (so documents sort like
// keys), its fields the key, partition, version, sources, value and index
// values (table_doc.go). Clover can read them with its own API. The
// tables' index entries, members keys, claim epochs and checkpoints live
// beside Clover's keys in a namespace of their own (table_layout.go).
//
// A table's Apply writes its documents, their index entries and members
// keys, the collection size and the partition checkpoint as one Pebble
// batch after checking the claim epoch, or nothing; readers see whole
// batches. Live batches are synced (WithFsync), replay batches are not:
// the changelog restores what a power loss drops.
//
// The write path is tuned for the engine's loop of loading aggregates and
// writing them back:
//
//   - A write cache per table (tableCaches, bounded by WithWriteCache)
//     holds what the next write of each key read or written needs and,
//     for small documents, the whole document, so that Apply reads
//     nothing for cached keys and Load answers them from memory. It is
//     filled in the background when a table is first opened
//     (table_warm.go).
//   - Documents are encoded as msgpack by hand (tableEncoder, byte for
//     byte what Clover's encoder writes), without Clover's reflection.
//   - A restore into an empty table (the bulk load, table_bulk.go) reads
//     nothing: its batches are buffered and written out as sorted files
//     that Pebble ingests (table_ingest.go), bounded by WithBulkMemory.
//   - Queries walk one index's entries between their bounds, reading
//     O(limit) documents whatever the table's size (table_query.go).
//
// Open migrates the movie job's state from the movie layout of earlier
// versions into the table "movies" (migrate.go), and refuses a data
// directory holding only the old bbolt store (ErrOldStore). A file that
// fails its checksum condemns the store (ErrCorrupt, corrupt.go); writes
// fail with engine.ErrUnavailable while the volume has less free space
// than WithDiskReserve (diskguard.go). The directory is locked (flock)
// while a Store is open: a second process fails with ErrLocked.
package docstore
