package docstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// BenchmarkUniformCycle measures the store's side of the uniform
// 1M-movie run: on a restored store of benchDocs movies, rounds of 1000
// random movies per partition, each loaded (Load, as the engine does for
// movies its cache dropped) and written back one rating later (Apply,
// fsync on), on a table with the movie job's spec (movies.Spec).
// cpu-µs/update includes the engine's background
// compactions; written-B/update is what Pebble flushed and compacted per
// update (its write amplification); query-µs is a 100-movie range query
// on the tree the rounds left; -v logs Pebble's metrics. Numbers in
// docs/benchmarks.md ("Store and engine microbenchmarks"):
//
//	go test -run '^$' -bench BenchmarkUniformCycle -benchtime 130x ./docstore
func BenchmarkUniformCycle(b *testing.B) {
	ctx := context.Background()
	b.Run("table", func(b *testing.B) {
		s, n := cycleStore(b)
		tb := mustTable(b, s, movies.Spec)
		if err := restoreTable(ctx, tb, n); err != nil { // claims each partition
			b.Fatal(err)
		}
		epochs := claimCycle(b, func(p int32) (int64, error) { return tb.Claim(ctx, p) })
		var got map[string]engine.Doc
		load := func(_ int32, ids []int64) error {
			keys := make([][]byte, len(ids))
			for i, id := range ids {
				keys[i] = movies.Key(id)
			}
			var err error
			got, err = tb.Load(ctx, keys)
			if err == nil && len(got) != len(ids) {
				err = fmt.Errorf("load: %d of %d", len(got), len(ids))
			}
			return err
		}
		apply := func(p int32, ids []int64, r *rand.Rand, checkpoint int64) error {
			docs := make([]engine.Doc, 0, len(ids))
			for _, id := range ids {
				d := got[string(movies.Key(id))]
				count := int64(binary.BigEndian.Uint64(d.Value)) + 1
				sum := math.Float64frombits(binary.BigEndian.Uint64(d.Value[8:])) + float64(1+r.IntN(10))
				docs = append(docs, movieTableDoc(id, p, d.Version+1, count, sum))
			}
			return tb.Apply(ctx, engine.DocBatch{Partition: p, Epoch: epochs[p], Docs: docs, Checkpoint: checkpoint})
		}
		query := func(lo, hi float64) (int, error) {
			page, err := tb.Query(ctx, engine.IndexQuery{Index: "avg", Min: engine.Num(lo), Max: engine.Num(hi),
				HasMin: true, HasMax: true, Desc: true, Limit: cycleQueryLimit})
			return len(page.Docs), err
		}
		runUniformCycle(b, s, n, load, apply, query)
	})
}

// cycleStore opens an empty store for BenchmarkUniformCycle, closed when
// the benchmark ends, and returns it with the number of movies to hold.
func cycleStore(b *testing.B) (*Store, int) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s, benchDocs()
}

// claimCycle claims the three partitions of restoreLog and returns their
// epochs.
func claimCycle(b *testing.B, claim func(p int32) (int64, error)) map[int32]int64 {
	epochs := map[int32]int64{}
	for p := range int32(3) {
		e, err := claim(p)
		if err != nil {
			b.Fatal(err)
		}
		epochs[p] = e
	}
	return epochs
}

// cycleQueries and cycleQueryLimit shape the queries that end a
// BenchmarkUniformCycle run: pages of 100 movies, the API's default.
const cycleQueries, cycleQueryLimit = 300, 100

// runUniformCycle runs the rounds of BenchmarkUniformCycle on s (n movies
// restored over three partitions): per round and partition, load reads
// 1000 distinct random movies of the partition and apply writes them back
// one rating later. It reports CPU, load and apply time and the bytes
// Pebble wrote, per update. Then, on the tree the updates left (their
// index deletions included), it times cycleQueries range queries, each a
// page of the movies whose average lies in a random window one point
// wide, answered by query, and reports the mean as query-µs.
func runUniformCycle(b *testing.B, s *Store, n int, load func(p int32, ids []int64) error,
	apply func(p int32, ids []int64, r *rand.Rand, checkpoint int64) error,
	query func(lo, hi float64) (int, error)) {
	written := func() uint64 {
		var w uint64
		for _, l := range s.kv.(*pebbleKV).db.Metrics().Levels {
			w += l.TableBytesCompacted + l.TableBytesFlushed
		}
		return w
	}
	w0 := written()
	r := rand.New(rand.NewPCG(3, 3))
	updates := 0
	var loadT, applyT time.Duration
	cpu0 := cpuTime()
	for b.Loop() {
		for p := range int32(3) {
			seen := map[int64]bool{}
			ids := make([]int64, 0, 1000)
			for len(ids) < 1000 {
				id := 3*r.Int64N(int64(n/3)) + int64(p) + 1 // restoreLog puts id in partition (id-1)%3
				if !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
			}
			t0 := time.Now()
			if err := load(p, ids); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := apply(p, ids, r, int64(updates)); err != nil {
				b.Fatal(err)
			}
			loadT += t1.Sub(t0)
			applyT += time.Since(t1)
			updates += len(ids)
		}
	}
	cpu := cpuTime() - cpu0
	var queryT time.Duration
	for range cycleQueries {
		lo := 1 + 8*r.Float64()
		t0 := time.Now()
		got, err := query(lo, lo+1)
		queryT += time.Since(t0)
		if err != nil || got != cycleQueryLimit {
			b.Fatalf("query [%.2f, %.2f]: got %d movies, %v; want %d", lo, lo+1, got, err, cycleQueryLimit)
		}
	}
	b.ReportMetric(float64(queryT.Nanoseconds())/cycleQueries/1e3, "query-µs")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(updates)/1e3, "cpu-µs/update")
	b.ReportMetric(float64(loadT.Nanoseconds())/float64(updates)/1e3, "load-µs/update")
	b.ReportMetric(float64(applyT.Nanoseconds())/float64(updates)/1e3, "apply-µs/update")
	b.ReportMetric(float64(written()-w0)/float64(updates), "written-B/update")
	if testing.Verbose() {
		b.Logf("%s", s.kv.(*pebbleKV).db.Metrics()) // the tree's shape
	}
}
