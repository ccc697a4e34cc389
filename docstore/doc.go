// Package docstore is keepstate's embedded store: engine.Tables on a
// Clover v2 document database on Pebble (an LSM tree), persistent under
// one directory.
//
// Each table (Store.OpenTable) is a Clover collection, "t_<name>", with
// one document per key: its _id is the key in hex (so documents sort like
// keys), its fields the key, partition, version, sources, value and index
// values (table_doc.go). Clover can read them with its own API. The
// tables' index entries, members keys (one per document, partition
// first, for drops and scans), claim epochs and checkpoints live beside
// Clover's keys in a namespace of their own (table_layout.go); the format
// marker in another.
//
// Clover talks to its storage through store.Store; this package gives it
// one bound to a Pebble snapshot (reads) or to one write batch (writes).
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
//     holds, for every key read or written, what its next write needs
//     (version, partition, index values) and, for small documents, the
//     whole document, so that Apply reads nothing for cached keys and Load
//     answers them without a search through the LSM's levels. It mirrors
//     the committed state, learns from Loads, and is filled from the
//     table's documents in the background when the table is first opened
//     (table_warm.go).
//   - Documents are encoded as msgpack by hand (tableEncoder, byte for
//     byte what Clover's encoder writes), without Clover's reflection.
//   - A restore into an empty table (the bulk load, table_bulk.go) reads
//     nothing: its batches are buffered and written out as sorted files
//     that Pebble ingests (table_ingest.go), bounded by WithBulkMemory.
//   - Queries walk one index's entries between their bounds, reading
//     O(limit) documents whatever the table's size (table_query.go).
//
// Stores written by earlier versions may hold the movie job's state in the
// movie layout (one Clover document per movie in the collection "movies",
// Clover's rank index, members, checkpoints and epochs in namespaces of
// their own). Open migrates it into the table "movies" (avg index, ties
// ascending) and deletes its keys, keeping each partition's checkpoint and
// claim epoch, crash-safe and resumable (migrate.go); a store without it
// is left alone.
//
// Open does not read the store of the old format (v1, Clover on bbolt, the
// file keepstate.db): a data directory holding it and no Pebble store is
// refused with ErrOldStore (an ErrNotStore), the file left as it is;
// `keepstate reset` deletes it (RemoveOldStore), and the next start
// restores the state from the changelog.
//
// A file that fails its checksum condemns the store: every call fails with
// ErrCorrupt, and a marker file tells the next Open, which refuses the
// store or, with WithRebuildCorrupt, wipes it so the state is restored
// from the changelog (corrupt.go). Writes fail with engine.ErrUnavailable
// while the volume has less free space than WithDiskReserve, before Pebble
// meets a full disk (diskguard.go).
//
// The directory is locked (flock) while a Store is open: a second process
// fails with ErrLocked, naming the directory and the holder's pid, within
// the lock timeout instead of waiting forever.
package docstore
