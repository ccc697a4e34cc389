package docstore

import (
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestBulkLimits checks the bounds WithBulkMemory and WithWriteCache give
// the bulk load: its pinned write cache and its ingestion chunk.
func TestBulkLimits(t *testing.T) {
	for _, tc := range []struct {
		name               string
		memory             int64
		writeCache         int
		wantMax, wantChunk int
	}{
		{"no bound", 0, DefaultWriteCache, defaultBulkMax, defaultIngestChunk},
		{"large bound keeps the defaults", 1 << 40, DefaultWriteCache, defaultBulkMax, defaultIngestChunk},
		{"94 MiB", 94 << 20, 100_000, (94 << 20) / 2 / cacheEntryBytes, (94 << 20) / 4 / bufferedDocBytes},
		{"write cache is the floor", 94 << 20, 1_000_000, 1_000_000, (94 << 20) / 4 / bufferedDocBytes},
		{"tiny bound keeps a usable chunk", 1 << 20, 0, (1 << 20) / 2 / cacheEntryBytes, minIngestChunk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := defaults()
			WithWriteCache(tc.writeCache)(&o)
			WithBulkMemory(tc.memory)(&o)
			gotMax, gotChunk := o.bulkLimits()
			if gotMax != tc.wantMax || gotChunk != tc.wantChunk {
				t.Errorf("bulkLimits() = %d, %d; want %d, %d", gotMax, gotChunk, tc.wantMax, tc.wantChunk)
			}
		})
	}
}

// TestBulkMemoryBoundsTheBulkLoad restores 600 documents (two versions
// each) into an empty table: without a bound the bulk load reads nothing
// and its pinned cache holds every document; with WithBulkMemory for 200
// the cache never holds more than 200, the load goes on past its full
// cache (reading the rewritten keys the cache lacks), and the table ends
// the same.
func TestBulkMemoryBoundsTheBulkLoad(t *testing.T) {
	var log []engine.DocBatch
	var want []engine.Doc
	for round := int64(1); round <= 2; round++ {
		for p := range int32(3) {
			b := engine.DocBatch{Partition: p, Checkpoint: round, Replay: true}
			for i := range 200 {
				d := orderDoc(int(p)*1000+i, p, round)
				b.Docs = append(b.Docs, d)
				if round == 2 {
					want = append(want, d)
				}
			}
			log = append(log, b)
		}
	}
	for _, tc := range []struct {
		name    string
		opts    []Option
		bounded bool
	}{
		{"unbounded", nil, false},
		{"bounded", []Option{WithBulkMemory(2 * 200 * cacheEntryBytes)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTemp(t, append([]Option{WithFsync(false), WithWriteCache(10)}, tc.opts...)...)
			defer s.Close()
			if got := s.bulkMax; tc.bounded && got != 200 {
				t.Fatalf("bulk cache limit %d; want 200", got)
			}
			s.ingestChunk = 100 // an ingestion per batch: the cache fills during the load
			tb := mustTable(t, s, ordersSpec)
			replayTable(t, tb, log)
			wantCheckpoints(t, tb, 3, 2) // writes out what is buffered
			s.wmu.Lock()
			s.tcache.mu.RLock()
			n, on := s.tcache.n, tb.cache.bulk.on
			s.tcache.mu.RUnlock()
			s.wmu.Unlock()
			switch reads := s.counts.writeReads.Load(); {
			case !tc.bounded && (reads != 0 || n != 600):
				t.Errorf("unbounded restore read %d documents and cached %d; want 0 and 600", reads, n)
			case tc.bounded && n > 200:
				t.Errorf("write cache holds %d documents; want at most 200", n)
			case tc.bounded && (!on || reads == 0):
				t.Errorf("bulk load on %v, %d documents read; want it on past its full cache, reading the keys it rewrote", on, reads)
			}
			wantTableDocs(t, s, tb, want)
		})
	}
}
