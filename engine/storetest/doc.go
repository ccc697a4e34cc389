// Package storetest is the one conformance suite every engine.Store
// implementation runs: round trips, atomic batches with their checkpoint,
// version and epoch fencing, partition drops, range queries with cursor
// paging (checked against a brute-force model), whole-batch visibility for
// concurrent readers, and the optional PartitionScanner and Resetter
// abilities when a store has them.
//
// RunTables is the same for engine.Tables, over two job shapes (MovieShape:
// int64 keys and one number index; OrderShape: string keys, a number and a
// string index): opaque round trips, atomic batches, fencing, drops,
// isolated tables and persisted specs, index queries in both orders with
// ties, bounds and cursors (checked against a model and a seeded random
// run), whole-batch visibility, TableScanner and TableResetter.
//
// A store's test calls Run with a function that opens a fresh, empty store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) engine.Store { return openEmpty(t) })
//	}
//
// Only tests import this package.
package storetest
