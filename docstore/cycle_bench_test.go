package docstore

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// BenchmarkUniformCycle measures the store's side of the uniform
// 1M-movie run: on a restored store of benchDocs movies, rounds of 1000
// random movies per partition, each loaded (Load, as the engine does for
// movies its cache dropped) and written back one rating later (Apply,
// fsync on). cpu-µs/update includes the engine's background compactions;
// written-B/update is what Pebble flushed and compacted per update (its
// write amplification); -v logs Pebble's metrics. Numbers in
// docs/benchmarks.md ("Where clover's uniform CPU goes"):
//
//	go test -run '^$' -bench BenchmarkUniformCycle -benchtime 130x ./docstore
func BenchmarkUniformCycle(b *testing.B) {
	n := benchDocs()
	ctx := context.Background()
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := restore(ctx, s, n); err != nil {
		b.Fatal(err)
	}
	epochs := map[int32]int64{}
	for p := range int32(3) {
		if epochs[p], err = s.Claim(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	written := func() uint64 {
		kv, ok := s.kv.(*pebbleKV)
		if !ok {
			return 0
		}
		var w uint64
		for _, l := range kv.db.Metrics().Levels {
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
			got, err := s.Load(ctx, ids)
			if err != nil || len(got) != len(ids) {
				b.Fatalf("load: %d of %d, %v", len(got), len(ids), err)
			}
			t1 := time.Now()
			docs := make([]engine.MovieStats, 0, len(ids))
			for _, id := range ids {
				m := got[id]
				m.Version++
				m.Count++
				m.Sum += float64(1 + r.IntN(10))
				m.Sources = map[int32]int64{p: m.Version}
				docs = append(docs, m)
			}
			if err := s.Apply(ctx, engine.Batch{Partition: p, Epoch: epochs[p], Docs: docs, Checkpoint: int64(updates)}); err != nil {
				b.Fatal(err)
			}
			loadT += t1.Sub(t0)
			applyT += time.Since(t1)
			updates += len(ids)
		}
	}
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(updates)/1e3, "cpu-µs/update")
	b.ReportMetric(float64(loadT.Nanoseconds())/float64(updates)/1e3, "load-µs/update")
	b.ReportMetric(float64(applyT.Nanoseconds())/float64(updates)/1e3, "apply-µs/update")
	b.ReportMetric(float64(written()-w0)/float64(updates), "written-B/update")
	if kv, ok := s.kv.(*pebbleKV); ok && testing.Verbose() {
		b.Logf("%s", kv.db.Metrics()) // the tree's shape: go test -v
	}
}
