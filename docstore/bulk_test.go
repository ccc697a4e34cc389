package docstore

import (
	"context"
	"maps"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// replayLog is a changelog of three partitions as a restore replays it:
// batches in changelog order, movies written again by later batches with
// higher versions (so their rank entries move), a movie twice in one
// batch, and a batch repeating an older version (skipped by replay).
func replayLog() []engine.Batch {
	var out []engine.Batch
	version := int64(0)
	for round := range 4 {
		for p := range int32(3) {
			var docs []engine.MovieStats
			for id := int64(1); id <= 600; id++ {
				if int32(id%3) != p || (round > 0 && (id/3)%int64(round+1) != 0) {
					continue
				}
				version++
				m := syntheticMovie(id, version)
				m.Partition = p
				docs = append(docs, m)
			}
			if round == 2 {
				old := docs[0]
				old.Version = 1 // stale: skipped
				docs = append(docs, old)
				again := docs[1]
				again.Version, again.Count = version+1, again.Count+1 // same movie twice, newer last
				version++
				docs = append(docs, again)
			}
			out = append(out, engine.Batch{Partition: p, Docs: docs, Checkpoint: int64(round + 1), Replay: true})
		}
	}
	return out
}

// replayAll claims every partition and applies the log.
func replayAll(t *testing.T, s *Store, log []engine.Batch) {
	t.Helper()
	ctx := context.Background()
	epochs := map[int32]int64{}
	for _, b := range log {
		if _, ok := epochs[b.Partition]; !ok {
			e, err := s.Claim(ctx, b.Partition)
			if err != nil {
				t.Fatal(err)
			}
			epochs[b.Partition] = e
		}
		b.Epoch = epochs[b.Partition]
		if err := s.Apply(ctx, b); err != nil {
			t.Fatalf("replay partition %d checkpoint %d: %v", b.Partition, b.Checkpoint, err)
		}
	}
}

// contents returns every movie 1..n the store holds.
func storedMovies(t *testing.T, s *Store, n int64) map[int64]engine.MovieStats {
	t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	docs, err := s.Load(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

func sameMovies(a, b map[int64]engine.MovieStats) bool {
	return maps.EqualFunc(a, b, func(x, y engine.MovieStats) bool {
		return x.Version == y.Version && x.Count == y.Count && x.Sum == y.Sum && x.Partition == y.Partition &&
			maps.Equal(x.Sources, y.Sources)
	})
}

// TestBulkLoadMatchesReadingPath replays the same changelog into an empty
// store three times: with the bulk-load path writing ingested files (the
// default), with it writing batches, and without it. The bulk loads must
// read no document and all three must leave the same documents,
// checkpoints and index.
func TestBulkLoadMatchesReadingPath(t *testing.T) {
	log := replayLog()
	ingest := openTemp(t, WithFsync(false))
	defer ingest.Close()
	// Chunks of 150 movies: the log's batches (about 200 movies) start
	// background ingestions while the next batches buffer.
	chunked := openTemp(t, WithFsync(false), withIngestChunk(150))
	defer chunked.Close()
	batches := openTemp(t, WithFsync(false), withoutIngest())
	defer batches.Close()
	reading := openTemp(t, WithFsync(false), withoutBulkLoad())
	defer reading.Close()
	for _, s := range []*Store{ingest, chunked, batches, reading} {
		replayAll(t, s, log)
	}
	want := storedMovies(t, reading, 600) // reads write the buffer out
	for _, tc := range []struct {
		name        string
		s           *Store
		wantIngests int64 // at least
	}{{"ingest", ingest, 1}, {"ingest in chunks", chunked, 4}, {"batches", batches, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			got := storedMovies(t, s, 600)
			if n := s.counts.writeReads.Load(); n != 0 {
				t.Errorf("bulk load read %d documents; want 0", n)
			}
			if n := s.counts.ingests.Load(); n < tc.wantIngests || (tc.wantIngests == 0 && n != 0) {
				t.Errorf("%d ingestions; want at least %d (none when 0)", n, tc.wantIngests)
			}
			if !s.bulk.on || len(s.bulk.parts) != 3 || len(s.priors.m) != 600 {
				t.Errorf("bulk state on=%v partitions=%d cached=%d; want on with 3 and 600", s.bulk.on, len(s.bulk.parts), len(s.priors.m))
			}
			if len(got) != 600 || !sameMovies(got, want) {
				t.Fatalf("bulk store holds %d movies, reading store %d, or they differ", len(got), len(want))
			}
		})
	}
	if got := reading.counts.writeReads.Load(); got == 0 {
		t.Errorf("reading path read no document; the comparison is meaningless")
	}
	for _, s := range []*Store{ingest, chunked, batches, reading} {
		if err := checkIndexAgrees(s); err != nil {
			t.Fatal(err)
		}
		for p := range int32(3) {
			if next, ok, err := s.Checkpoint(context.Background(), p); err != nil || !ok || next != 4 {
				t.Fatalf("checkpoint of partition %d = %d, %v, %v; want 4", p, next, ok, err)
			}
		}
	}
}

// TestBulkLoadEndsOnLiveWrite checks that the first live batch ends the
// bulk load and updates a bulk-loaded movie correctly: from the write
// cache without a read, or with one read when the cache is off.
func TestBulkLoadEndsOnLiveWrite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      []Option
		wantReads int64
	}{{"write cache", nil, 0}, {"no write cache", []Option{WithWriteCache(0)}, 1}} {
		t.Run(tc.name, func(t *testing.T) { testBulkLoadEndsOnLiveWrite(t, tc.opts, tc.wantReads) })
	}
}

func testBulkLoadEndsOnLiveWrite(t *testing.T, opts []Option, wantReads int64) {
	s := openTemp(t, append(opts, WithFsync(false))...)
	defer s.Close()
	replayAll(t, s, replayLog())
	ctx := context.Background()
	m := syntheticMovie(4, 1<<40)
	reads := s.counts.writeReads.Load()
	applyOne(t, s, 1, m, 9)
	if s.bulk.on {
		t.Fatal("bulk load still on after a live batch")
	}
	if got := s.counts.writeReads.Load() - reads; got != wantReads {
		t.Fatalf("live batch read %d documents; want %d", got, wantReads)
	}
	if got, err := s.Get(ctx, 4); err != nil || got.Version != m.Version {
		t.Fatalf("Get(4) = %+v, %v; want version %d", got, err, m.Version)
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
}

// TestBulkLoadNeedsAnEmptyStore checks that a replay into an empty
// partition of a store that already holds documents reads as usual.
func TestBulkLoadNeedsAnEmptyStore(t *testing.T) {
	s := openTemp(t, WithFsync(false))
	defer s.Close()
	fill(t, s, 10, 10) // partition 0 (claimed by fill)
	ctx := context.Background()
	epoch, err := s.Claim(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	m := syntheticMovie(3, 99)
	m.Partition = 5 // movie 3 moves from partition 0
	if err := s.Apply(ctx, engine.Batch{Partition: 5, Epoch: epoch, Docs: []engine.MovieStats{m}, Checkpoint: 1, Replay: true}); err != nil {
		t.Fatal(err)
	}
	if s.bulk.on {
		t.Fatal("bulk load started on a store holding documents")
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
}

// TestWriteCacheFollowsDropAndReset checks that the write cache never
// answers for a movie the store no longer holds: after DropPartition and
// Reset, a write of a dropped movie is an insert again (index and size
// agree with the documents), and a full cache stays at its limit.
func TestWriteCacheFollowsDropAndReset(t *testing.T) {
	s := openTemp(t, WithFsync(false), WithWriteCache(5))
	defer s.Close()
	ctx := context.Background()
	fill(t, s, 8, 8)
	if got := len(s.priors.m); got != 5 {
		t.Fatalf("cache holds %d movies; want its limit 5", got)
	}
	for p := range int32(4) { // syntheticMovie spreads movies over 4 partitions
		if err := s.DropPartition(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(s.priors.m); got != 0 {
		t.Fatalf("cache holds %d movies after the drop; want 0", got)
	}
	fill(t, s, 8, 8)
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(s.priors.m); got != 0 {
		t.Fatalf("cache holds %d movies after the reset; want 0", got)
	}
	fill(t, s, 8, 8)
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
}

// TestReopenFillsWriteCache checks that a reopened store fills its write
// cache from the members keys in the background, so that the first live
// batch after a restart reads no document and still writes correctly.
func TestReopenFillsWriteCache(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 500, 100)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	<-s.warmed
	if got := len(s.priors.m); got != 500 {
		t.Fatalf("write cache holds %d movies after reopen; want 500", got)
	}
	if p, ok := s.priors.get(7); !ok || p.version != 1 || p.part != syntheticMovie(7, 1).Partition || p.avg() != syntheticMovie(7, 1).Avg() {
		t.Fatalf("cached movie 7 = %+v, %v; want version 1 and its partition and average", p, ok)
	}
	ctx := context.Background()
	epoch, err := s.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var docs []engine.MovieStats
	for id := int64(1); id <= 50; id++ {
		docs = append(docs, syntheticMovie(id, 2))
	}
	if err := s.Apply(ctx, engine.Batch{Epoch: epoch, Docs: docs, Checkpoint: 501}); err != nil {
		t.Fatal(err)
	}
	if got := s.counts.writeReads.Load(); got != 0 {
		t.Fatalf("live batch after reopen read %d documents; want 0", got)
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
}
