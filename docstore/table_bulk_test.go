package docstore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// tableReplayLog is a restore of ordersSpec's table: rounds of replay
// batches over three partitions, each round rewriting most keys of its
// partition at a newer version (new index values), with an older version
// replayed again (skipped) and one key moving from partition 0 to 1. It
// returns the batches and the documents the table must end with.
func tableReplayLog() ([]engine.DocBatch, []engine.Doc) {
	var log []engine.DocBatch
	latest := map[string]engine.Doc{}
	add := func(b *engine.DocBatch, d engine.Doc) {
		b.Docs = append(b.Docs, d)
		if cur, ok := latest[string(d.Key)]; !ok || cur.Version < d.Version {
			latest[string(d.Key)] = d
		}
	}
	for round := int64(1); round <= 4; round++ {
		for p := range int32(3) {
			b := engine.DocBatch{Partition: p, Checkpoint: round * 10, Replay: true}
			for i := range 60 {
				if (i+int(round))%3 != 0 {
					add(&b, orderDoc(int(p)*100+i, p, round))
				}
			}
			if round == 3 {
				add(&b, orderDoc(int(p)*100+1, p, 1)) // older than what round 2 wrote
			}
			if p == 0 && round == 1 {
				add(&b, orderDoc(999, 0, 1))
			}
			if p == 1 && round == 3 {
				add(&b, orderDoc(999, 1, 7)) // moves to partition 1
			}
			log = append(log, b)
		}
	}
	want := slices.Collect(maps.Values(latest))
	slices.SortFunc(want, func(a, b engine.Doc) int { return slices.Compare(a.Key, b.Key) })
	return log, want
}

// replayTable claims every partition of log in tb and applies its batches.
func replayTable(t *testing.T, tb engine.Table, log []engine.DocBatch) {
	t.Helper()
	ctx := context.Background()
	epochs := map[int32]int64{}
	for _, b := range log {
		if _, ok := epochs[b.Partition]; !ok {
			e, err := tb.Claim(ctx, b.Partition)
			if err != nil {
				t.Fatal(err)
			}
			epochs[b.Partition] = e
		}
		b.Epoch = epochs[b.Partition]
		if err := tb.Apply(ctx, b); err != nil {
			t.Fatalf("replay partition %d checkpoint %d: %v", b.Partition, b.Checkpoint, err)
		}
	}
}

// wantCheckpoints checks that every partition of tb is at checkpoint want.
func wantCheckpoints(t *testing.T, tb engine.Table, parts int32, want int64) {
	t.Helper()
	for p := range parts {
		next, ok, err := tb.Checkpoint(context.Background(), p)
		if err != nil || !ok || next != want {
			t.Fatalf("Checkpoint(%d) = %d, %v, %v; want %d", p, next, ok, err, want)
		}
	}
}

// TestTableBulkLoadMatchesReadingPath restores the same log into an empty
// table by bulk load (ingested files, in chunks small enough for several
// ingestions, and one buffer written out at once) and by the reading path
// (every batch reads, then writes): both hold the same documents, index
// entries, members keys and size, the bulk load read no document, and
// every document reads back the same after a reopen.
func TestTableBulkLoadMatchesReadingPath(t *testing.T) {
	log, want := tableReplayLog()
	for _, tc := range []struct {
		name        string
		opts        []Option
		bulkMax     int // the pinned cache's bound, when set
		wantIngests bool
		wantReads   bool
	}{
		{"bulk, several ingestions", []Option{withIngestChunk(50)}, 0, true, false},
		{"bulk, one ingestion", nil, 0, true, false},
		{"bulk, the cache overflows", []Option{withIngestChunk(50), WithWriteCache(100)}, 120, true, true},
		{"reading path", []Option{withoutBulkLoad()}, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, append([]Option{WithFsync(false)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			if tc.bulkMax > 0 {
				s.bulkMax = tc.bulkMax
			}
			tb := mustTable(t, s, ordersSpec)
			replayTable(t, tb, log)
			wantCheckpoints(t, tb, 3, 40) // writes the buffer out
			if n := s.counts.ingests.Load(); (n > 0) != tc.wantIngests {
				t.Errorf("%d ingestions; want some: %v", n, tc.wantIngests)
			}
			if reads := s.counts.writeReads.Load(); (reads > 0) != tc.wantReads {
				t.Errorf("the restore read %d documents; want some: %v", reads, tc.wantReads)
			}
			wantTableDocs(t, s, tb, want)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, err = Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tb = mustTable(t, s, ordersSpec)
			<-tb.cache.warmed
			s.tcache.clearAll() // every Load reads the store
			wantCheckpoints(t, tb, 3, 40)
			wantTableDocs(t, s, tb, want)
		})
	}
}

// TestTableBulkLoadOverflowReadsOnlySeenKeys restores keys that each
// appear once (a compacted changelog) into a table whose pinned cache
// holds a sixth of them: the load goes on past the full cache, looks up
// no document (a key the load never wrote is not read), and ends with
// the same documents, index entries and size as the reading path. With
// keys rewritten after the cache filled (tableReplayLog), the rewritten
// keys are read and the result is the same too (the cases of
// TestTableBulkLoadMatchesReadingPath).
func TestTableBulkLoadOverflowReadsOnlySeenKeys(t *testing.T) {
	var log []engine.DocBatch
	var want []engine.Doc
	for round := int64(1); round <= 4; round++ {
		for p := range int32(3) {
			b := engine.DocBatch{Partition: p, Checkpoint: round * 10, Replay: true}
			for i := range 60 {
				d := orderDoc(int(round)*1000+int(p)*100+i, p, round)
				b.Docs = append(b.Docs, d)
				want = append(want, d)
			}
			log = append(log, b)
		}
	}
	slices.SortFunc(want, func(a, b engine.Doc) int { return slices.Compare(a.Key, b.Key) })
	s, err := Open(t.TempDir(), WithFsync(false), withIngestChunk(50), WithWriteCache(100))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.bulkMax = 120
	tb := mustTable(t, s, ordersSpec)
	replayTable(t, tb, log)
	wantCheckpoints(t, tb, 3, 40) // writes the buffer out
	if !tb.cache.bulk.overflow {
		t.Fatalf("the pinned cache did not overflow (%d keys cached); the test needs it to", tb.cache.m.len())
	}
	if !tb.cache.bulk.on {
		t.Errorf("the bulk load ended when the cache filled; want it on until another kind of write")
	}
	if n := s.counts.docGets.Load(); n != 0 {
		t.Errorf("the restore looked up %d documents; want 0 (every key was new)", n)
	}
	if n := s.counts.ingests.Load(); n < 2 {
		t.Errorf("%d ingestions; want several", n)
	}
	wantTableDocs(t, s, tb, want)
}

// TestTableBulkLoadEndsOnOtherWrites starts a bulk load and then writes
// the table otherwise: a batch of documents, a drop, a reset or a Settle
// (warm-ups handed over) ends the load, its buffer written out first; a checkpoint alone or a claim does
// not (a partition's restore ends with one) but comes after what is
// buffered.
func TestTableBulkLoadEndsOnOtherWrites(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		write  func(t *testing.T, tb *table)
		stayOn bool // the write keeps the load on
	}{
		{"live batch", func(t *testing.T, tb *table) { applyDocs(t, tb, 1, 5, orderDoc(500, 1, 1)) }, false},
		{"a checkpoint alone, live", func(t *testing.T, tb *table) { applyDocs(t, tb, 0, 5) }, true},
		{"a checkpoint alone, replayed", func(t *testing.T, tb *table) {
			epoch, err := tb.Claim(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Checkpoint: 5, Replay: true}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"claim", func(t *testing.T, tb *table) {
			if _, err := tb.Claim(ctx, 0); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"reset", func(t *testing.T, tb *table) {
			if err := tb.Reset(ctx); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"drop", func(t *testing.T, tb *table) {
			if err := tb.DropPartition(ctx, 2); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"settle", func(t *testing.T, tb *table) {
			if err := tb.Settle(ctx); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTemp(t, WithFsync(false))
			defer s.Close()
			s.tcache.idle = time.Hour // written out by the write under test
			tb := mustTable(t, s, ordersSpec)
			epoch, err := tb.Claim(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			first := engine.DocBatch{Partition: 0, Epoch: epoch, Docs: []engine.Doc{orderDoc(1, 0, 1), orderDoc(2, 0, 1)}, Checkpoint: 2, Replay: true}
			if err := tb.Apply(ctx, first); err != nil {
				t.Fatal(err)
			}
			s.wmu.Lock()
			on, buffered := tb.cache.bulk.on, len(tb.cache.bulk.docs)
			s.wmu.Unlock()
			if !on || buffered != 2 {
				t.Fatalf("after a replay into an empty table: bulk load %v, %d buffered; want on, 2", on, buffered)
			}
			tc.write(t, tb)
			s.wmu.Lock()
			on, buffered = tb.cache.bulk.on, len(tb.cache.bulk.docs)
			s.wmu.Unlock()
			if on != tc.stayOn || buffered != 0 {
				t.Errorf("after the write: bulk load %v, %d buffered; want on %v, none buffered", on, buffered, tc.stayOn)
			}
			if tc.stayOn {
				next, _, err := tb.Checkpoint(ctx, 0)
				if want := map[bool]int64{true: 2, false: 5}[tc.name == "claim"]; err != nil || next != want {
					t.Errorf("Checkpoint(0) = %d, %v; want %d", next, err, want)
				}
			}
			if _, err := tb.Get(ctx, orderDoc(1, 0, 1).Key); err != nil && tc.name != "reset" {
				t.Errorf("the buffered document: %v", err)
			}
			if _, err := rawTableState(s, tb); err != nil {
				t.Error(err)
			}
		})
	}
}

// crash closes s as a killed process leaves it: the ingestion in flight,
// if any, lands (the test decides what the kill interrupts), what the
// bulk loads still buffer is lost, and the engine closes without a flush
// (the next open replays its log).
func crash(t *testing.T, s *Store) {
	t.Helper()
	s.stopping.Store(true)
	s.wmu.Lock()
	caches := slices.Collect(maps.Values(s.tcache.byName))
	s.wmu.Unlock()
	for _, tc := range caches {
		<-tc.warmed // before the lock: warm-up takes it shared
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed.Store(true)
	s.wmu.Lock()
	for _, tc := range caches {
		if tc.bulk.timer != nil {
			tc.bulk.timer.Stop()
		}
		if err := s.awaitTableIngest(tc); err != nil {
			t.Fatal(err)
		}
	}
	s.wmu.Unlock()
	if err := s.kv.close(false); err != nil {
		t.Fatal(err)
	}
	if err := s.lock.unlock(); err != nil {
		t.Fatal(err)
	}
}

// TestTableBulkLoadCrash checks what a crash during a bulk load keeps: a
// bulk batch is durable once the buffer holding it is written out, not
// when Apply returns. Batches of 30 documents into partition 0 with a
// buffer of 100: the fourth batch fills the buffer (written out), the
// next two stay buffered. After a crash the partition is at the fourth
// batch's checkpoint with exactly its documents, and a restore from there
// completes it; a clean Close writes everything out.
func TestTableBulkLoadCrash(t *testing.T) {
	batch := func(k int) engine.DocBatch {
		b := engine.DocBatch{Partition: 0, Checkpoint: int64(k + 1), Replay: true}
		for i := range 30 {
			b.Docs = append(b.Docs, orderDoc(k*30+i, 0, 1))
		}
		return b
	}
	var log []engine.DocBatch
	for k := range 6 {
		log = append(log, batch(k))
	}
	docsOf := func(batches []engine.DocBatch) []engine.Doc {
		var out []engine.Doc
		for _, b := range batches {
			out = append(out, b.Docs...)
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		stop       func(t *testing.T, s *Store)
		checkpoint int64
		docs       []engine.Doc
	}{
		{"crash", crash, 4, docsOf(log[:4])},
		{"close", func(t *testing.T, s *Store) {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}, 6, docsOf(log)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, WithFsync(false), withIngestChunk(100))
			if err != nil {
				t.Fatal(err)
			}
			s.tcache.idle = time.Hour // no write-out between batches
			tb := mustTable(t, s, ordersSpec)
			replayTable(t, tb, log)
			tc.stop(t, s)

			s, err = Open(dir, WithFsync(false))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tb = mustTable(t, s, ordersSpec)
			wantCheckpoints(t, tb, 1, tc.checkpoint)
			wantTableDocs(t, s, tb, tc.docs)
			// The restore goes on from the checkpoint (the reading path:
			// the partition is not empty).
			replayTable(t, tb, log[tc.checkpoint:])
			wantCheckpoints(t, tb, 1, 6)
			wantTableDocs(t, s, tb, docsOf(log))
		})
	}
}

// TestTableBulkLoadKeepsNewestVersion restores many versions of one key,
// then an older and a same-version document of it, into one buffer: the
// buffer holds each key once, the newest version (the first of equal
// ones, as the reading path keeps), and the table ends as the reading
// path leaves it. A drop of the partition then removes the buffered key,
// and a restore into the emptied table starts a new load.
func TestTableBulkLoadKeepsNewestVersion(t *testing.T) {
	ctx := context.Background()
	var b engine.DocBatch
	for v := int64(1); v <= 50; v++ {
		b.Docs = append(b.Docs, orderDoc(1, 0, v), orderDoc(2, 0, v/10+1))
	}
	again := orderDoc(1, 0, 50)
	again.Value = []byte(`{"same version":true}`)
	log := []engine.DocBatch{
		{Partition: 0, Docs: b.Docs, Checkpoint: 100, Replay: true},
		{Partition: 0, Docs: []engine.Doc{orderDoc(1, 0, 30), again}, Checkpoint: 102, Replay: true},
	}
	want := []engine.Doc{orderDoc(1, 0, 50), orderDoc(2, 0, 6)}
	for _, bulk := range []bool{true, false} {
		opts := []Option{WithFsync(false)}
		if !bulk {
			opts = append(opts, withoutBulkLoad())
		}
		s := openTemp(t, opts...)
		s.tcache.idle = time.Hour // one buffer, written out by the reads below
		tb := mustTable(t, s, ordersSpec)
		replayTable(t, tb, log)
		s.wmu.Lock()
		on, buffered := tb.cache.bulk.on, len(tb.cache.bulk.docs)
		s.wmu.Unlock()
		if on != bulk || bulk && buffered != 2 {
			t.Fatalf("bulk %v: bulk load %v with %d documents buffered; want 2", bulk, on, buffered)
		}
		wantCheckpoints(t, tb, 1, 102)
		wantTableDocs(t, s, tb, want)

		if bulk {
			replayTable(t, tb, log[1:2]) // not empty any more: the reading path
			if err := tb.DropPartition(ctx, 0); err != nil {
				t.Fatal(err)
			}
			wantTableDocs(t, s, tb, nil)
			replayTable(t, tb, []engine.DocBatch{{Partition: 0, Docs: []engine.Doc{orderDoc(1, 0, 3), orderDoc(1, 0, 2)}, Checkpoint: 2, Replay: true}})
			s.wmu.Lock()
			on = tb.cache.bulk.on
			s.wmu.Unlock()
			if !on {
				t.Error("the restore into the emptied table took the reading path")
			}
			if err := tb.DropPartition(ctx, 0); err != nil { // buffered, then dropped
				t.Fatal(err)
			}
			if _, err := tb.Get(ctx, orderDoc(1, 0, 3).Key); !errors.Is(err, engine.ErrNotFound) {
				t.Errorf("Get after the drop: %v; want ErrNotFound", err)
			}
			wantTableDocs(t, s, tb, nil)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
