package docstore

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// benchDocs is the size of the benchmark store; KEEPSTATE_BENCH_DOCS
// overrides it (for a quick look).
func benchDocs() int {
	if n, err := strconv.Atoi(os.Getenv("KEEPSTATE_BENCH_DOCS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// benchData is the store shared by the sub-benchmarks of one process,
// built once. KEEPSTATE_BENCH_DIR keeps it across runs.
var benchData struct {
	once    sync.Once
	dir     string
	cleanup bool
	err     error
}

func benchDir(b *testing.B) string {
	b.Helper()
	benchData.once.Do(func() {
		n := benchDocs()
		dir := os.Getenv("KEEPSTATE_BENCH_DIR")
		if dir == "" {
			tmp, err := os.MkdirTemp("", "docstore-bench-")
			if err != nil {
				benchData.err = err
				return
			}
			dir, benchData.cleanup = filepath.Join(tmp, "data"), true
		}
		benchData.dir = dir
		s, err := Open(dir, WithFsync(false))
		if err != nil {
			benchData.err = err
			return
		}
		defer s.Close()
		if next, ok, _ := s.Checkpoint(context.Background(), 0); ok && next == int64(n) {
			return // reused
		}
		start := time.Now()
		fill(b, s, n, 10_000)
		b.Logf("built a %d-document store in %v (%.0f docs/s, fsync off, batches of 10000 inserts)",
			n, time.Since(start), float64(n)/time.Since(start).Seconds())
	})
	if benchData.err != nil {
		b.Fatalf("bench store: %v", benchData.err)
	}
	return benchData.dir
}

// BenchmarkDocstore runs every docstore measurement against one store of
// benchDocs documents, so the numbers come side by side from one run:
//
//	go test -run '^$' -bench . -benchtime 3s ./docstore
func BenchmarkDocstore(b *testing.B) {
	dir := benchDir(b)
	n := int64(benchDocs())
	ctx := context.Background()
	open := func(b *testing.B, opts ...Option) *Store {
		s, err := Open(dir, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}

	b.Run("Get", func(b *testing.B) {
		s := open(b)
		r := rand.New(rand.NewPCG(1, 1))
		b.ResetTimer()
		for b.Loop() {
			if _, err := s.Get(ctx, 1+r.Int64N(n)); err != nil {
				b.Fatal(err)
			}
		}
	})

	top := engine.RangeQuery{MinAvg: 8, MaxAvg: math.Inf(1), Limit: 100}
	b.Run("TopMinAvg100/index", func(b *testing.B) {
		s := open(b)
		for b.Loop() {
			page, err := s.Range(ctx, top)
			if err != nil || len(page.Movies) != 100 {
				b.Fatalf("range = %d movies, %v", len(page.Movies), err)
			}
		}
	})
	b.Run("TopMinAvg100/fullscan", func(b *testing.B) {
		s := open(b)
		want, err := s.Range(ctx, top)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			got, err := scanTop(s, top.MinAvg, top.Limit)
			if err != nil || len(got) != len(want.Movies) || got[0].MovieID != want.Movies[0].MovieID ||
				got[len(got)-1].MovieID != want.Movies[len(got)-1].MovieID {
				b.Fatalf("full scan answer differs from the index answer (%d movies, %v)", len(got), err)
			}
		}
	})

	b.Run("ReopenToFirstAnswer", func(b *testing.B) {
		id := n / 2
		for b.Loop() {
			s, err := Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Get(ctx, id); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})

	version := time.Now().UnixNano() // newer than anything stored
	upsert := func(b *testing.B, s *Store, batch int, pick func(r *rand.Rand, i int) int64) {
		if int64(batch) > n/2 {
			b.Skipf("batches of %d need a store of at least %d documents", batch, 2*batch)
		}
		epoch, err := s.Claim(ctx, 0)
		if err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(2, uint64(version)))
		docs := make([]engine.MovieStats, batch)
		start := time.Now()
		for b.Loop() {
			version++
			seen := map[int64]bool{}
			for i := range docs {
				id := pick(r, i)
				for seen[id] {
					id = 1 + r.Int64N(n)
				}
				seen[id] = true
				docs[i] = syntheticMovie(id, version)
			}
			if err := s.Apply(ctx, engine.Batch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: n}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "docs/s")
	}
	random := func(r *rand.Rand, _ int) int64 { return 1 + r.Int64N(n) }
	b.Run("Upsert1000/random/fsync", func(b *testing.B) { upsert(b, open(b), 1000, random) })
	b.Run("Upsert1000/random/nofsync", func(b *testing.B) { upsert(b, open(b, WithFsync(false)), 1000, random) })
	var base int64
	clustered := func(r *rand.Rand, i int) int64 { // one contiguous run of ids per batch
		if i == 0 {
			base = r.Int64N(n - 1000)
		}
		return 1 + base + int64(i)
	}
	b.Run("Upsert1000/clustered/fsync", func(b *testing.B) { upsert(b, open(b), 1000, clustered) })
	b.Run("Upsert10000/random/fsync", func(b *testing.B) { upsert(b, open(b), 10_000, random) })
}
