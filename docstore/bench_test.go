package docstore

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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

	reopen := func(b *testing.B, opts ...Option) {
		// One commit with opts first, so the file is in the state those
		// options leave it in (bbolt's NoFreelistSync, measured once,
		// would leave no freelist and make every open rebuild it).
		s, err := Open(dir, opts...)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Claim(ctx, 99); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		id := n / 2
		for b.Loop() {
			s, err := Open(dir, opts...)
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
	}
	b.Run("ReopenToFirstAnswer", func(b *testing.B) { reopen(b) })

	version := time.Now().UnixNano() // newer than anything stored
	// upsert applies b.N batches of batch distinct movies drawn by pick and
	// reports documents per second and bbolt page writes per batch.
	upsert := func(b *testing.B, s *Store, batch int, pick func(r *rand.Rand, i int, seen map[int64]bool) int64) {
		if int64(batch) > n/2 {
			b.Skipf("batches of %d need a store of at least %d documents", batch, 2*batch)
		}
		epoch, err := s.Claim(ctx, 0)
		if err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(2, uint64(version)))
		docs := make([]engine.MovieStats, batch)
		before := s.db.Stats().TxStats
		start := time.Now()
		for b.Loop() {
			version++
			seen := make(map[int64]bool, batch)
			for i := range docs {
				id := pick(r, i, seen)
				seen[id] = true
				docs[i] = syntheticMovie(id, version)
			}
			if err := s.Apply(ctx, engine.Batch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: n}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "docs/s")
		after := s.db.Stats().TxStats
		b.ReportMetric(float64(after.GetWrite()-before.GetWrite())/float64(b.N), "pagewrites/batch")
	}
	random := func(r *rand.Rand, _ int, seen map[int64]bool) int64 {
		id := 1 + r.Int64N(n)
		for seen[id] {
			id = 1 + r.Int64N(n)
		}
		return id
	}
	var base int64
	clustered := func(r *rand.Rand, i int, _ map[int64]bool) int64 { // one contiguous run of ids per batch
		if i == 0 {
			base = r.Int64N(n - 1000)
		}
		return 1 + base + int64(i)
	}
	// skewed draws distinct movies from the popularity of app.NewGenerator
	// (Zipf s=1.07 over 1..n: a few popular ids dominate), redrawing ids
	// already in the batch: a partition's batch after the engine's
	// write-behind cache merged its ratings.
	var zipf *rand.Zipf
	skewed := func(r *rand.Rand, i int, seen map[int64]bool) int64 {
		if zipf == nil {
			zipf = rand.NewZipf(r, 1.07, 2, uint64(n-1))
		}
		id := int64(zipf.Uint64()) + 1
		for seen[id] {
			id = int64(zipf.Uint64()) + 1
		}
		return id
	}
	// Each write benchmark runs twice, one right after the other: "now" as
	// the store writes today (docWriter) and "before" as it wrote before
	// (Clover's UpdateById per document).
	variants := []struct {
		name string
		opts []Option
	}{{"now", nil}, {"before", []Option{withCloverUpdates()}}}
	for _, w := range []struct {
		name  string
		batch int
		pick  func(r *rand.Rand, i int, seen map[int64]bool) int64
		fsync bool
	}{
		{"Upsert1000/random/fsync", 1000, random, true},
		{"Upsert1000/random/nofsync", 1000, random, false},
		{"Upsert1000/skewed/fsync", 1000, skewed, true},
		{"Upsert1000/skewed/nofsync", 1000, skewed, false},
		{"Upsert1000/clustered/fsync", 1000, clustered, true},
		{"Upsert10000/random/fsync", 10_000, random, true},
	} {
		for _, v := range variants {
			b.Run(w.name+"/"+v.name, func(b *testing.B) {
				upsert(b, open(b, append(slices.Clone(v.opts), WithFsync(w.fsync))...), w.batch, w.pick)
			})
		}
	}
}
