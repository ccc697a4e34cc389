package storebench

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/boltstore"
)

// BenchmarkStores measures the Clover and the Redis store side by side: both
// hold the same benchDocs movies (built once per process), and every
// workload runs on one store right after the other, so their ratio comes
// from the same machine state. KEEPSTATE_BENCH_ROUNDS=k (default 1) repeats
// each workload k times with the stores taking turns (clover, redis,
// clover, redis, ...), which -count cannot do: it repeats one
// sub-benchmark k times in a row. Sub-benchmarks are named
// <workload>/round=<k>/store=<name>, which
// `benchstat -col /store -ignore /round` turns into side-by-side columns.
//
//	KEEPSTATE_BENCH_ROUNDS=6 go test -run '^$' -bench BenchmarkStores -benchtime 2s -timeout 30m ./internal/storebench
//
// Workloads:
//   - get: Get of a uniformly random movie (p50/p99 in µs).
//   - top100-minAvg8: Range minAvg=8, limit 100 (p50/p99 in µs).
//   - apply-1000: batches of 1000 distinct uniformly random movies, the
//     partitions taking turns (docs/s counts the time inside Apply only).
//   - apply-1000-skewed: the same with movies drawn from app.NewGenerator's
//     Zipf popularity, 1000 distinct movies per batch, as the engine's
//     write-behind cache writes them (ratings/doc: how many ratings of the
//     partition it took to collect them).
//
// Applies also report written-B/doc for Clover: bytes bbolt wrote to its
// file per document (Redis runs without persistence, in another process).
// Redis sub-benchmarks report server-µs/op (reads) or server-µs/doc
// (applies): the time redis-server spent executing the commands sent (from
// INFO commandstats), the rest being the client, the loopback and waiting
// for a CPU.
//
// Clover runs with fsync on (the default, "clover") and off
// ("clover-nofsync", applies only); Redis with its averages stream on
// (XADD MAXLEN ~ 100000 per document, the default).
func BenchmarkStores(b *testing.B) {
	fixture(b)
	bbolt := target{name: "bbolt", w: fix.bbolt, open: openBbolt,
		fresh: func() (engine.Store, error) { return boltstore.Open(fix.bboltDir) }}
	clover := target{name: "clover", w: fix.clover, open: openClover,
		fresh: func() (engine.Store, error) { return docstore.Open(fix.cloverDir) }}
	redis := target{name: "redis", w: fix.redisW, open: openRedis, server: true}
	readers := []target{bbolt, clover, redis}
	writers := readers
	each := func(workload string, ts []target, fn func(*testing.B, target)) {
		b.Run(workload, func(b *testing.B) {
			for round := range benchRounds() {
				b.Run("round="+strconv.Itoa(round+1), func(b *testing.B) {
					for _, t := range ts {
						b.Run("store="+t.name, func(b *testing.B) {
							logNotes(b)
							fn(b, t)
						})
					}
				})
			}
		})
	}
	each("get", readers, benchGet)
	each("top100-minAvg8", readers, benchTop)
	each("apply-1000", writers, func(b *testing.B, t target) { benchApply(b, t, 1000, uniformPicker) })
	each("apply-1000-skewed", writers, func(b *testing.B, t target) { benchApply(b, t, 1000, zipfPicker) })
	each("get-during-apply", writers, benchGetDuringApply)
	each("reopen", []target{bbolt, clover}, benchReopen)
	each("rss", []target{bbolt, clover}, benchRSS)
}

// benchRounds is KEEPSTATE_BENCH_ROUNDS, default 1.
func benchRounds() int {
	if n, err := strconv.Atoi(os.Getenv("KEEPSTATE_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// benchGet looks up random movies and checks each answer is the version
// last written.
func benchGet(b *testing.B, t target) {
	s := t.open(b)
	ctx := context.Background()
	r := rng(b)
	var lat samples
	st := startServerTime(t, "hmget")
	for b.Loop() {
		id := 1 + r.Int64N(int64(fix.n))
		t0 := time.Now()
		m, err := s.Get(ctx, id)
		lat = append(lat, time.Since(t0))
		if err != nil || m.MovieID != id || m.Version != t.w.versions[id] {
			b.Fatalf("Get(%d) = movie %d version %d, %v; want version %d", id, m.MovieID, m.Version, err, t.w.versions[id])
		}
	}
	lat.report(b)
	st.report(b, len(lat), "server-µs/op")
}

// benchTop asks for the 100 best movies averaging at least 8 and checks the
// page is full and in order.
func benchTop(b *testing.B, t target) {
	s := t.open(b)
	ctx := context.Background()
	q := engine.RangeQuery{MinAvg: 8, MaxAvg: math.Inf(1), Limit: 100}
	var lat samples
	st := startServerTime(t, "evalsha", "eval")
	for b.Loop() {
		t0 := time.Now()
		page, err := s.Range(ctx, q)
		lat = append(lat, time.Since(t0))
		if err != nil || len(page.Movies) != q.Limit {
			b.Fatalf("Range(minAvg=8) = %d movies, %v; want %d", len(page.Movies), err, q.Limit)
		}
		for i, m := range page.Movies {
			c := engine.Cursor{Avg: m.Avg(), MovieID: m.MovieID}
			if m.Avg() < q.MinAvg || (i > 0 && !(engine.Cursor{Avg: page.Movies[i-1].Avg(), MovieID: page.Movies[i-1].MovieID}).Before(c)) {
				b.Fatalf("Range(minAvg=8): movie %d (%d, avg %v) out of order or below the bound", i, m.MovieID, m.Avg())
			}
		}
	}
	lat.report(b)
	st.report(b, len(lat), "server-µs/op")
}

// benchApply writes batches of size distinct movies picked by newPicker,
// one partition after the other, each under the epoch claimed for this
// run. Picking ids and building documents is outside the timer.
func benchApply(b *testing.B, t target, size int, newPicker func(int, *rand.Rand) *picker) {
	if size*partitions*2 > fix.n {
		b.Skipf("batches of %d need at least %d movies, have %d", size, size*partitions*2, fix.n)
	}
	s := t.open(b)
	ctx := context.Background()
	var epochs [partitions]int64
	for p := range int32(partitions) {
		e, err := s.Claim(ctx, p)
		if err != nil {
			b.Fatalf("claim partition %d: %v", p, err)
		}
		epochs[p] = e
	}
	pk := newPicker(fix.n, rng(b))
	written0, ioOK := writtenBytes()
	st := startServerTime(t, "evalsha", "eval")
	var (
		busy           time.Duration
		docs, draws    int
		batchesWritten int
	)
	for b.Loop() {
		b.StopTimer()
		p := int32(batchesWritten % partitions)
		ids, d, err := pk.ids(p, size)
		if err != nil {
			b.Fatal(err)
		}
		batch := t.w.batch(p, epochs[p], ids)
		b.StartTimer()
		t0 := time.Now()
		if err := s.Apply(ctx, batch); err != nil {
			b.Fatalf("apply batch %d (partition %d): %v", batchesWritten, p, err)
		}
		busy += time.Since(t0)
		docs, draws = docs+size, draws+d
		batchesWritten++
	}
	b.ReportMetric(float64(docs)/busy.Seconds(), "docs/s")
	b.ReportMetric(float64(draws)/float64(docs), "ratings/doc")
	st.report(b, docs, "server-µs/doc")
	// Clover writes from this process; Redis (no persistence) writes
	// nothing to disk, and from another process.
	if written1, ok := writtenBytes(); ok && ioOK && strings.HasPrefix(t.name, "clover") {
		b.ReportMetric(float64(written1-written0)/float64(docs), "written-B/doc")
	}
}

// writtenBytes returns the bytes this process has handed to write system
// calls so far (wchar of /proc/self/io: for Clover, bbolt's page writes,
// whether or not the page cache later merges them); ok is false where that
// file does not exist.
func writtenBytes() (n int64, ok bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, found := strings.CutPrefix(line, "wchar: "); found {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
