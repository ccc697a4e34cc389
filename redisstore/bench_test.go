package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// The benchmarks share one redis-server per test process; the 1M-movie
// data set is loaded into it once, by the first benchmark that needs it.
var shared struct {
	mu      sync.Mutex
	redis   *testkit.Redis
	big     *Store
	bigErr  error
	loadFor time.Duration
}

const (
	bigMovies     = 1_000_000
	bigPartitions = 8
	batchSize     = 1000
)

func sharedRedis(b *testing.B) *testkit.Redis {
	b.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.redis == nil {
		r, err := testkit.LaunchRedis()
		if errors.Is(err, testkit.ErrRedisMissing) {
			testkit.Missing(b, "redis-server", testkit.RedisInstall)
		}
		if err != nil {
			b.Fatalf("launch redis-server: %v", err)
		}
		shared.redis = r
	}
	return shared.redis
}

// closeShared stops the shared server (from TestMain).
func closeShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.big != nil {
		_ = shared.big.Close()
	}
	if shared.redis != nil {
		_ = shared.redis.Close()
	}
}

// benchMovie is movie i of the benchmark data: averages spread over 0..10
// with many ties (sums of whole ratings).
func benchMovie(i int64, version int64, rng *rand.Rand) engine.MovieStats {
	count := rng.Int64N(50) + 1
	sum := 0.0
	for range count {
		sum += float64(rng.IntN(11))
	}
	p := int32(i % bigPartitions)
	return engine.MovieStats{MovieID: i, Partition: p, Count: count, Sum: sum, Version: version,
		Sources: map[int32]int64{p: version}}
}

// bigStore returns a store holding bigMovies movies, loading them on first
// use with concurrent 1000-document batches through Apply.
func bigStore(b *testing.B) *Store {
	b.Helper()
	r := sharedRedis(b)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.big != nil || shared.bigErr != nil {
		if shared.bigErr != nil {
			b.Fatal(shared.bigErr)
		}
		return shared.big
	}
	ctx := context.Background()
	s, err := Open(ctx, r.URL(), WithPrefix("bench1m:"), WithStreamMaxLen(0))
	if err != nil {
		shared.bigErr = err
		b.Fatal(err)
	}
	start := time.Now()
	errs := make(chan error, bigPartitions)
	var wg sync.WaitGroup
	for p := range int32(bigPartitions) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- loadPartition(ctx, s, p)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			shared.bigErr = fmt.Errorf("load %d movies: %w", bigMovies, err)
			_ = s.Close()
			b.Fatal(shared.bigErr)
		}
	}
	shared.loadFor = time.Since(start)
	shared.big = s
	mem, _ := s.client.MemoryUsage(ctx, s.keys.byAvg()).Result()
	used, _ := s.client.Info(ctx, "memory").Result()
	b.Logf("loaded %d movies in %v (%.0f docs/s); by-avg zset %d MB; %s", bigMovies,
		shared.loadFor.Round(time.Millisecond), bigMovies/shared.loadFor.Seconds(), mem>>20, usedMemory(used))
	return s
}

func loadPartition(ctx context.Context, s *Store, p int32) error {
	rng := rand.New(rand.NewPCG(uint64(p), 1))
	epoch, err := s.Claim(ctx, p)
	if err != nil {
		return err
	}
	docs := make([]engine.MovieStats, 0, batchSize)
	flush := func(next int64) error {
		err := s.Apply(ctx, engine.Batch{Partition: p, Epoch: epoch, Docs: docs, Checkpoint: next})
		docs = docs[:0]
		return err
	}
	for id := int64(p); id < bigMovies; id += bigPartitions {
		docs = append(docs, benchMovie(id, 1, rng))
		if len(docs) == batchSize {
			if err := flush(id); err != nil {
				return err
			}
		}
	}
	if len(docs) > 0 {
		return flush(bigMovies)
	}
	return nil
}

// serverCPU is the CPU time redis-server has used so far, in seconds
// (INFO cpu: user plus system), for per-document server costs.
func serverCPU(ctx context.Context, s *Store) float64 {
	info, err := s.client.Info(ctx, "cpu").Result()
	if err != nil {
		return math.NaN()
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}

// reportServerCPU reports the server's CPU per document since cpu0.
func reportServerCPU(ctx context.Context, b *testing.B, s *Store, cpu0 float64, docs int) {
	b.ReportMetric((serverCPU(ctx, s)-cpu0)*1e6/float64(docs), "server-µs/doc")
}

// latencies records per-operation durations and reports percentiles.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	at := func(q float64) float64 {
		return float64(l[min(len(l)-1, int(q*float64(len(l))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// BenchmarkApplyBatch applies 1000-document batches (one Lua script each)
// to a store that already holds the documents, so every document is an
// update of hash, sorted set member and (with the stream) one XADD.
func BenchmarkApplyBatch(b *testing.B) {
	r := sharedRedis(b)
	for _, bc := range []struct {
		name      string
		streamMax int64
		parallel  int
	}{
		{"stream/sequential", DefaultStreamMaxLen, 1},
		{"nostream/sequential", 0, 1},
		{"stream/4-partitions-concurrently", DefaultStreamMaxLen, 4},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, r.URL(), WithPrefix(uniquePrefix()), WithStreamMaxLen(bc.streamMax))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			defer func() { _ = s.Reset(ctx) }()
			errs := make(chan error, bc.parallel)
			cpu0 := serverCPU(ctx, s)
			b.ResetTimer()
			start := time.Now()
			for w := range bc.parallel {
				n := b.N / bc.parallel
				if w < b.N%bc.parallel {
					n++
				}
				go func() { errs <- applyBatches(ctx, s, int32(w), n) }()
			}
			for range bc.parallel {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batchSize)/time.Since(start).Seconds(), "docs/s")
			reportServerCPU(ctx, b, s, cpu0, b.N*batchSize)
		})
	}
}

// applyBatches applies n batches of batchSize documents to partition p,
// cycling through 100 batches' worth of movies with rising versions.
func applyBatches(ctx context.Context, s *Store, p int32, n int) error {
	const distinct = 100 * batchSize
	rng := rand.New(rand.NewPCG(uint64(p), 2))
	epoch, err := s.Claim(ctx, p)
	if err != nil {
		return err
	}
	docs := make([]engine.MovieStats, batchSize)
	for i := range n {
		base := int64(p)*distinct + int64(i*batchSize)%distinct
		for j := range docs {
			docs[j] = benchMovie(base+int64(j), int64(i+1), rng)
			docs[j].Partition = p
			docs[j].Sources = map[int32]int64{p: int64(i + 1)}
		}
		if err := s.Apply(ctx, engine.Batch{Partition: p, Epoch: epoch, Docs: docs, Checkpoint: int64(i)}); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkGet is the latency of one key lookup among 1M movies.
func BenchmarkGet(b *testing.B) {
	s := bigStore(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	var lat latencies
	for b.Loop() {
		id := rng.Int64N(bigMovies)
		t0 := time.Now()
		m, err := s.Get(ctx, id)
		lat = append(lat, time.Since(t0))
		if err != nil || m.MovieID != id {
			b.Fatalf("Get(%d) = %+v, %v", id, m, err)
		}
	}
	lat.report(b)
}

// BenchmarkRangeTop100 is the latency of a 100-movie page among 1M movies.
func BenchmarkRangeTop100(b *testing.B) {
	s := bigStore(b)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		q    engine.RangeQuery
	}{
		{"minAvg=8", engine.RangeQuery{MinAvg: 8, MaxAvg: math.Inf(1), Limit: 100}},
		{"all", engine.RangeQuery{MinAvg: math.Inf(-1), MaxAvg: math.Inf(1), Limit: 100}},
		{"cursor-mid-range", engine.RangeQuery{MinAvg: 0, MaxAvg: math.Inf(1), Limit: 100,
			After: &engine.Cursor{Avg: 5, MovieID: bigMovies / 2}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var lat latencies
			for b.Loop() {
				t0 := time.Now()
				page, err := s.Range(ctx, bc.q)
				lat = append(lat, time.Since(t0))
				if err != nil || len(page.Movies) != 100 {
					b.Fatalf("Range = %d movies, %v; want 100", len(page.Movies), err)
				}
			}
			lat.report(b)
		})
	}
}

// usedMemory picks used_memory_human out of INFO memory.
func usedMemory(info string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory_human:"); ok {
			return "redis used_memory " + v
		}
	}
	return "redis used_memory unknown"
}
