package docstore

import (
	"encoding/json"
	"fmt"
	"time"
)

// Bulk loads are written as sorted files, not through the memtable: a
// restore through Pebble's write path (log, memtable, flush, compactions
// rewriting the same keys at every level) spends most of its time in the
// engine. An engine that ingests (kvIngester: Pebble) links the files into
// its tree in one step: each key is written and sorted once, and a
// buffer's keys land together (tableBulk, table_ingest.go).

// defaultIngestChunk is how many documents a bulk-load buffer holds before
// it is handed to a background ingestion (a few hundred bytes each in
// memory, twice while one chunk is ingested and the next one buffers).
const defaultIngestChunk = 250_000

// ingestIdle is how long a bulk-load buffer waits for the next bulk batch
// before it is written out (the engine says nothing when a restore ends).
const ingestIdle = 100 * time.Millisecond

// kvEntry is one key of an ingested file: a value to set, or a deletion.
type kvEntry struct {
	key   []byte
	value []byte
	del   bool
}

// kvIngester is the optional ability of a kv engine to add runs of
// entries atomically and durably, newer than everything it holds, without
// its write path. Each run is sorted by key, no key twice, and below the
// next. holdCompactions(true) says a bulk load starts, whose ingestions
// overlap one another, and (false) that one ended: an engine may defer
// merging the files until then.
type kvIngester interface {
	ingest(runs [][]kvEntry) error
	holdCompactions(on bool)
}

// withSize returns Clover's collection metadata meta with size applied to
// its size.
func withSize(meta []byte, size func(int) int) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(meta, &fields); err != nil {
		return nil, fmt.Errorf("collection metadata: %w", err)
	}
	var n int
	if err := json.Unmarshal(fields["Size"], &n); err != nil {
		return nil, fmt.Errorf("collection size: %w", err)
	}
	fields["Size"], _ = json.Marshal(size(n))
	return json.Marshal(fields)
}

// setSize applies size to the size in the Clover metadata at key, in b.
func setSize(b kvBatch, key []byte, size func(int) int) error {
	raw, err := b.get(key)
	if err != nil {
		return err
	}
	out, err := withSize(raw, size)
	if err != nil {
		return err
	}
	return b.set(key, out)
}
