// Package storetest is the one conformance suite every engine.Tables
// implementation runs (RunTables), over three job shapes (MovieShape: int64
// keys, one number index, ties ascending; OrderShape: string keys, a number
// and a string index; TagShape: byte keys holding 0x00 and 0xff, one string
// index): opaque round trips, atomic batches with their checkpoint,
// version and epoch fencing, drops, isolated tables and persisted specs,
// index queries in both orders with ties, bounds and cursors (checked
// against a model and a seeded random run), whole-batch visibility for
// concurrent readers, and the optional TableScanner and TableResetter
// abilities when a store's tables have them. Every table it opens has
// TableSpec.Partitions (Partitions), and every document it writes is in
// its key's PartitionFor partition, as the engine's are, so a store that
// keeps a partition's keys together (a Redis Cluster) runs it too.
//
// A store's test calls RunTables with a function that opens a fresh, empty
// store:
//
//	func TestTablesConformance(t *testing.T) {
//		storetest.RunTables(t, func(t *testing.T) engine.Tables { return openEmpty(t) })
//	}
//
// Only tests import this package.
package storetest
