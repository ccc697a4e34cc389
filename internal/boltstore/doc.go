// Package boltstore is keepstate's first embedded store (format
// "keepstate-docstore v1"): Clover v2 on bbolt, one copy-on-write B+tree
// file. It is no longer a production path: docstore replaced it with Clover
// on Pebble and migrates its files on open. It is kept, unchanged apart
// from its name, only so that internal/storebench can measure the old and
// the new engine side by side in one run (docs/benchmarks-stores.md).
//
// Each movie is one Clover document in the "movies" collection, indexed on
// rank; Clover runs inside one bbolt transaction per batch, so a batch, its
// checkpoint and its epoch commit together. The directory is locked while
// a Store is open.
package boltstore
