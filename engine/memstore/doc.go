// Package memstore is an in-memory engine.Tables: maps under locks,
// scanned and sorted on every index query. It keeps nothing across
// processes, so a restart restores every partition from the changelog.
//
// It exists for tests and examples: the engine's unit tests (on kfake)
// run against it, and the conformance suite (engine/storetest) runs
// against it to check the suite itself. It is correct but not fast; use
// docstore or redisstore in production.
package memstore
