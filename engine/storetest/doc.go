// Package storetest is the one conformance suite every engine.Tables
// implementation runs (RunTables), over three job shapes (MovieShape,
// OrderShape, TagShape): opaque round trips, atomic batches with their
// checkpoint, version and epoch fencing, drops, isolated tables and
// persisted specs, index queries with ties, bounds and cursors (checked
// against a model and a seeded random run), whole-batch visibility for
// concurrent readers, and the optional TableScanner, TableResetter and
// FilteredQuerier abilities. A store's test calls RunTables with a
// function that opens a fresh, empty store:
//
//	func TestTablesConformance(t *testing.T) {
//		storetest.RunTables(t, func(t *testing.T) engine.Tables { return openEmpty(t) })
//	}
//
// Only tests import this package.
package storetest
