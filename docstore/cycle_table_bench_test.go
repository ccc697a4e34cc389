package docstore

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// BenchmarkUniformCycleTable is BenchmarkUniformCycle on a table with the
// movie job's spec (engine.MovieSpec) instead of the movie store: the
// same 1M movies and rounds, stored in the tables' layout (a smaller
// Clover document, 26-byte index entries of our own) rather than the
// movie store's (Clover's rank index, 93-byte entries). It measures what
// moving the movie job onto a table would save on the uniform workload.
func BenchmarkUniformCycleTable(b *testing.B) {
	n := benchDocs()
	ctx := context.Background()
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	tb := mustTable(b, s, engine.MovieSpec)
	value := func(count int64, sum float64) []byte {
		v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(count))
		return binary.BigEndian.AppendUint64(v, math.Float64bits(sum))
	}
	doc := func(id int64, p int32, version, count int64, sum float64) engine.Doc {
		return engine.Doc{Key: engine.EncodeMovieKey(id), Partition: p, Version: version,
			Sources: map[int32]int64{p: version}, Value: value(count, sum),
			Index: []engine.IndexValue{engine.Num(sum / float64(count))}}
	}
	epochs := map[int32]int64{}
	for p := range int32(3) {
		if epochs[p], err = tb.Claim(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	err = restoreLog(n, func(bt engine.Batch) error {
		docs := make([]engine.Doc, len(bt.Docs))
		for i, m := range bt.Docs {
			docs[i] = doc(m.MovieID, bt.Partition, m.Version, m.Count, m.Sum)
		}
		return tb.Apply(ctx, engine.DocBatch{Partition: bt.Partition, Epoch: epochs[bt.Partition], Docs: docs, Checkpoint: bt.Checkpoint, Replay: true})
	})
	if err != nil {
		b.Fatal(err)
	}
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
			keys := make([][]byte, 0, 1000)
			for len(keys) < 1000 {
				id := 3*r.Int64N(int64(n/3)) + int64(p) + 1 // restoreLog puts id in partition (id-1)%3
				if !seen[id] {
					seen[id] = true
					keys = append(keys, engine.EncodeMovieKey(id))
				}
			}
			t0 := time.Now()
			got, err := tb.Load(ctx, keys)
			if err != nil || len(got) != len(keys) {
				b.Fatalf("load: %d of %d, %v", len(got), len(keys), err)
			}
			t1 := time.Now()
			docs := make([]engine.Doc, 0, len(keys))
			for _, k := range keys {
				d := got[string(k)]
				id, _ := engine.DecodeMovieKey(k)
				count := int64(binary.BigEndian.Uint64(d.Value)) + 1
				sum := math.Float64frombits(binary.BigEndian.Uint64(d.Value[8:])) + float64(1+r.IntN(10))
				docs = append(docs, doc(id, p, d.Version+1, count, sum))
			}
			if err := tb.Apply(ctx, engine.DocBatch{Partition: p, Epoch: epochs[p], Docs: docs, Checkpoint: int64(updates)}); err != nil {
				b.Fatal(err)
			}
			loadT += t1.Sub(t0)
			applyT += time.Since(t1)
			updates += len(keys)
		}
	}
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(updates)/1e3, "cpu-µs/update")
	b.ReportMetric(float64(loadT.Nanoseconds())/float64(updates)/1e3, "load-µs/update")
	b.ReportMetric(float64(applyT.Nanoseconds())/float64(updates)/1e3, "apply-µs/update")
	b.ReportMetric(float64(written()-w0)/float64(updates), "written-B/update")
}
