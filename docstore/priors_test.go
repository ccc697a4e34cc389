package docstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestLoadTeachesTheWriteCache checks that Apply writes the movies a Load
// has just read, and the ones it found absent, without reading them again,
// and writes them correctly (the index agrees with the documents).
func TestLoadTeachesTheWriteCache(t *testing.T) {
	s := openTemp(t, WithFsync(false), WithWriteCache(1000))
	defer s.Close()
	fill(t, s, 200, 50)
	<-s.Warmed()
	s.wmu.Lock()
	s.priors.clear() // what the writes taught it
	s.wmu.Unlock()
	ctx := context.Background()
	ids := []int64{3, 17, 150, 5000, 5001} // three stored, two absent
	got, err := s.Load(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Load returned %d movies; want 3", len(got))
	}
	if n := s.priors.len(); n != len(ids) {
		t.Fatalf("write cache learned %d movies; want %d", n, len(ids))
	}
	epoch, err := s.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var docs []engine.MovieStats
	for _, id := range ids {
		m := syntheticMovie(id, 7)
		m.Partition = 0
		docs = append(docs, m)
	}
	reads := s.counts.writeReads.Load()
	if err := s.Apply(ctx, engine.Batch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: 1000}); err != nil {
		t.Fatal(err)
	}
	if n := s.counts.writeReads.Load() - reads; n != 0 {
		t.Errorf("Apply after Load read %d documents; want 0", n)
	}
	for _, m := range docs {
		if g, err := s.Get(ctx, m.MovieID); err != nil || g.Version != 7 || g.Avg() != m.Avg() {
			t.Fatalf("Get(%d) = %+v, %v; want version 7, average %v", m.MovieID, g, err, m.Avg())
		}
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
}

// TestLoadLearnsNothingStale checks that what a Load read is taught to
// the write cache only while it is current: not over a movie the cache
// knows (a write since the snapshot put it there), not for a movie whose
// entry left the cache since the snapshot (written since and then evicted,
// it would look unknown), and not at all when the removals since the
// snapshot are no longer known or the cache was emptied.
func TestLoadLearnsNothingStale(t *testing.T) {
	s := openTemp(t, WithFsync(false), WithWriteCache(1000))
	defer s.Close()
	fill(t, s, 20, 20)
	<-s.Warmed()
	s.wmu.Lock()
	s.priors.clear()
	s.wmu.Unlock()
	write := func(id, version int64) { applyOne(t, s, 0, syntheticMovie(id, version), 100+version) }
	t.Run("written since", func(t *testing.T) {
		before := s.priors.removals.count()
		stale := map[int64]engine.MovieStats{5: syntheticMovie(5, 1)} // read, then movie 5 is written
		write(5, 2)
		s.learn(before, []int64{5, 6}, stale)
		if p, ok := s.priors.get(5); !ok || p.version != 2 {
			t.Fatalf("cached movie 5 = %+v, %v; want version 2 (the write), not the read", p, ok)
		}
		if _, exists, cached := s.priors.lookup(6); !cached || exists {
			t.Fatalf("movie 6: cached %v, exists %v; want known absent", cached, exists)
		}
	})
	t.Run("evicted since", func(t *testing.T) {
		before := s.priors.removals.count()
		stale := map[int64]engine.MovieStats{7: syntheticMovie(7, 1)}
		write(7, 3)
		s.wmu.Lock()
		s.priors.forget([]int64{7}) // as an eviction would
		s.wmu.Unlock()
		s.learn(before, []int64{7, 8}, stale)
		if _, _, cached := s.priors.lookup(7); cached {
			t.Fatalf("movie 7 learned from a read older than its eviction")
		}
		if _, exists, cached := s.priors.lookup(8); !cached || exists {
			t.Fatalf("movie 8 (not removed since the read): cached %v, exists %v; want known absent", cached, exists)
		}
	})
	t.Run("removal log outrun", func(t *testing.T) {
		before := s.priors.removals.count()
		s.wmu.Lock()
		for id := int64(100); id < 100+maxRemovalLog+1; id++ {
			s.priors.forget([]int64{id})
		}
		s.wmu.Unlock()
		s.learn(before, []int64{9}, nil)
		if _, _, cached := s.priors.lookup(9); cached {
			t.Fatalf("movie 9 learned although the removals since its read are no longer known")
		}
	})
	t.Run("emptied since", func(t *testing.T) {
		before := s.priors.removals.count()
		s.wmu.Lock()
		s.priors.clear()
		s.wmu.Unlock()
		s.learn(before, []int64{10}, nil)
		if _, _, cached := s.priors.lookup(10); cached {
			t.Fatalf("movie 10 learned from a read older than the cache's emptying")
		}
	})
}

// TestWriteCacheEvicts checks that a full write cache stays at its limit
// and that random loads and writes through a small cache keep the index
// agreeing with the documents.
func TestWriteCacheEvicts(t *testing.T) {
	s, epoch := openClaimed(t, WithFsync(false), WithWriteCache(16))
	defer s.Close()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	version := map[int64]int64{}
	for i := range 200 {
		docs := randomBatch(r, version, 20, 300)
		if i%2 == 0 {
			ids := make([]int64, len(docs))
			for j, m := range docs {
				ids[j] = m.MovieID
			}
			if _, err := s.Load(ctx, ids); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Apply(ctx, engine.Batch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
		if n := s.priors.len(); n > 16 {
			t.Fatalf("write cache holds %d movies; want at most 16", n)
		}
	}
	checkLatest(t, s, version)
}

// TestBulkLoadPinsTheWriteCache checks that a bulk load keeps every movie
// it writes even past the cache's limit (it takes a movie the cache does
// not know for a new one), and that the cache shrinks back to its limit
// when the load ends.
func TestBulkLoadPinsTheWriteCache(t *testing.T) {
	s := openTemp(t, WithFsync(false), WithWriteCache(10), withoutIngest())
	defer s.Close()
	replayAll(t, s, replayLog())
	if !s.bulk.on || s.priors.len() != 600 {
		t.Fatalf("bulk on=%v, cache %d; want on, 600 movies", s.bulk.on, s.priors.len())
	}
	if n := s.counts.writeReads.Load(); n != 0 {
		t.Fatalf("bulk load read %d documents; want 0", n)
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
	applyOne(t, s, 1, syntheticMovie(4, 1<<40), 9)
	if s.bulk.on || s.priors.len() > 10 {
		t.Fatalf("after a live batch: bulk on=%v, cache %d; want off, at most 10", s.bulk.on, s.priors.len())
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
}

// applyOne claims partition p and writes m there as one live batch ending
// at checkpoint.
func applyOne(t *testing.T, s *Store, p int32, m engine.MovieStats, checkpoint int64) {
	t.Helper()
	ctx := context.Background()
	epoch, err := s.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	m.Partition = p
	if err := s.Apply(ctx, engine.Batch{Partition: p, Epoch: epoch, Docs: []engine.MovieStats{m}, Checkpoint: checkpoint}); err != nil {
		t.Fatal(err)
	}
}

// TestWriteCacheUnderConcurrentLoads runs Loads beside a writer through a
// small cache, so that reads race commits and evictions: whatever the
// interleaving, every write must find the right old rank entry (the index
// agrees with the documents) and the last version of every movie.
func TestWriteCacheUnderConcurrentLoads(t *testing.T) {
	s, epoch := openClaimed(t, WithFsync(false), WithWriteCache(32))
	defer s.Close()
	ctx := context.Background()
	stop := loadConcurrently(7, func(r *rand.Rand) error {
		ids := make([]int64, 24)
		for i := range ids {
			ids[i] = r.Int64N(200) + 1
		}
		_, err := s.Load(ctx, ids)
		return err
	})
	applyRandom(t, s, epoch, 3, 200, stop, nil)
}

// applyRandom applies 300 batches of 16 random movies of 1..movies (its
// random source seeded with seed; each movie passed through shape first,
// unless nil) to partition 0 while the loaders of stop run, then stops
// them, fails on a load's error, checks that s holds every movie's last
// version and returns the versions.
func applyRandom(t *testing.T, s *Store, epoch int64, seed uint64, movies int64, stop func() error,
	shape func(engine.MovieStats) engine.MovieStats) map[int64]int64 {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed+1))
	version := map[int64]int64{}
	for i := range 300 {
		docs := randomBatch(r, version, 16, movies)
		for j := range docs {
			if shape != nil {
				docs[j] = shape(docs[j])
			}
		}
		if err := s.Apply(context.Background(), engine.Batch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: int64(i + 1)}); err != nil {
			stop()
			t.Fatal(err)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("load: %v", err)
	}
	checkLatest(t, s, version)
	return version
}

// loadConcurrently runs load over and over in two goroutines, each with
// its own random source (seeded with seed), until stop is called; stop
// waits for both and returns the first error of load.
func loadConcurrently(seed uint64, load func(r *rand.Rand) error) (stop func() error) {
	done := make(chan struct{})
	errs := make(chan error, 2)
	for g := range 2 {
		go func() {
			r := rand.New(rand.NewPCG(uint64(g), seed))
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if err := load(r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	return func() error {
		close(done)
		return errors.Join(<-errs, <-errs)
	}
}

// randomBatch returns n distinct movies of 1..of for partition 0, each at
// its next version (counted in version).
func randomBatch(r *rand.Rand, version map[int64]int64, n int, of int64) []engine.MovieStats {
	seen := map[int64]bool{}
	docs := make([]engine.MovieStats, 0, n)
	for len(docs) < n {
		id := r.Int64N(of) + 1
		if seen[id] {
			continue
		}
		seen[id] = true
		version[id]++
		m := syntheticMovie(id, version[id])
		m.Partition = 0
		docs = append(docs, m)
	}
	return docs
}

// checkLatest fails unless s holds every movie of version at its last
// version and average, and its index agrees with its documents.
func checkLatest(t *testing.T, s *Store, version map[int64]int64) {
	t.Helper()
	for id, v := range version {
		want := syntheticMovie(id, v)
		if g, err := s.Get(context.Background(), id); err != nil || g.Version != v || g.Avg() != want.Avg() {
			t.Fatalf("Get(%d) = version %d avg %v, %v; want version %d avg %v", id, g.Version, g.Avg(), err, v, want.Avg())
		}
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
}

// TestBulkMemoryBoundsTheBulkLoad replays the same log into a store with
// and without WithBulkMemory: the bounded bulk load ends once its cache
// holds what the budget allows and the rest of the replay reads before it
// writes, and both stores end with the same documents and a consistent
// index.
func TestBulkMemoryBoundsTheBulkLoad(t *testing.T) {
	want := map[int64]engine.MovieStats{}
	for _, tc := range []struct {
		name    string
		opts    []Option
		bounded bool
	}{
		{"unbounded", []Option{withoutIngest()}, false},
		{"bounded", []Option{withoutIngest(), WithBulkMemory(2 * 200 * priorEntryBytes)}, true},
		{"bounded, ingested", []Option{WithBulkMemory(2 * 200 * priorEntryBytes)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTemp(t, append([]Option{WithFsync(false), WithWriteCache(10)}, tc.opts...)...)
			defer s.Close()
			if got := s.priors.bulkMax; tc.bounded && got != 200 {
				t.Fatalf("bulk cache limit %d; want 200", got)
			}
			replayAll(t, s, replayLog())
			switch reads, n := s.counts.writeReads.Load(), s.priors.len(); {
			case !tc.bounded && (reads != 0 || n != 600):
				t.Errorf("unbounded replay read %d documents and cached %d movies; want 0 and 600", reads, n)
			case tc.bounded && n > 200:
				t.Errorf("write cache holds %d movies; want at most 200", n)
			case tc.bounded && s.bulk.on:
				t.Errorf("bulk load still on with its cache full; want ended")
			}
			if err := checkIndexAgrees(s); err != nil {
				t.Fatal(err)
			}
			for id := int64(1); id <= 600; id++ {
				got, err := s.Get(context.Background(), id)
				if err != nil {
					t.Fatalf("Get(%d): %v", id, err)
				}
				if w, ok := want[id]; ok && (got.Version != w.Version || got.Count != w.Count || got.Sum != w.Sum) {
					t.Fatalf("movie %d: version %d count %d sum %v; want %d %d %v (as unbounded)", id, got.Version, got.Count, got.Sum, w.Version, w.Count, w.Sum)
				}
				want[id] = got
			}
		})
	}
}

func TestBulkLimits(t *testing.T) {
	for _, tc := range []struct {
		name               string
		memory             int64
		writeCache         int
		wantMax, wantChunk int
	}{
		{"no bound", 0, DefaultWriteCache, defaultBulkMax, defaultIngestChunk},
		{"large bound keeps the defaults", 1 << 40, DefaultWriteCache, defaultBulkMax, defaultIngestChunk},
		{"94 MiB", 94 << 20, DefaultWriteCache, (94 << 20) / 2 / priorEntryBytes, 75820},
		{"write cache is the floor", 94 << 20, 1_000_000, 1_000_000, 75820},
		{"tiny bound keeps a usable chunk", 1 << 20, 0, (1 << 20) / 2 / priorEntryBytes, minIngestChunk},
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
