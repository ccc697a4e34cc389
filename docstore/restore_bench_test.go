package docstore

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// benchBulkMemory is the bulk-load share of a process at keepstate's
// default memory target (300 MiB: Go's share 243 MiB, the block cache's
// 64 MiB out, halved; app.bulkMemory).
const benchBulkMemory = 89 << 20

// uniformRestoreLog calls fn with the replay batches of a full restore of
// a uniform movie run: movies 1..n at version 1 (restoreLog's order), then
// n*2/5 updates of movies drawn uniformly, each a newer version, in
// replay batches of 5000 distinct documents per partition, the three
// partitions interleaved batch by batch as three concurrent restores
// reach the store. It returns the number of records.
func uniformRestoreLog(n int, fn func(engine.DocBatch) error) (int, error) {
	const parts, size = 3, 5000
	type stream struct {
		docs map[string]engine.Doc
		cp   int64
	}
	var ss [parts]stream
	for p := range ss {
		ss[p].docs = map[string]engine.Doc{}
	}
	records := 0
	add := func(d engine.Doc) error {
		records++
		s := &ss[d.Partition]
		s.docs[string(d.Key)] = d
		s.cp++
		if len(s.docs) < size {
			return nil
		}
		return flushStream(d.Partition, &s.docs, s.cp, fn)
	}
	versions := make([]int64, n+1)
	for id := int64(1); id <= int64(n); id++ {
		versions[id] = 1
		if err := add(benchMovie(id, int32((id-1)%parts), 1)); err != nil {
			return records, err
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	for range n * 2 / 5 {
		id := r.Int64N(int64(n)) + 1
		versions[id]++
		if err := add(benchMovie(id, int32((id-1)%parts), versions[id])); err != nil {
			return records, err
		}
	}
	for p := range int32(parts) {
		if err := flushStream(p, &ss[p].docs, ss[p].cp, fn); err != nil {
			return records, err
		}
	}
	return records, nil
}

// flushStream hands the documents pending for partition p to fn as one
// replay batch at checkpoint cp.
func flushStream(p int32, pending *map[string]engine.Doc, cp int64, fn func(engine.DocBatch) error) error {
	docs := make([]engine.Doc, 0, len(*pending))
	for _, d := range *pending {
		docs = append(docs, d)
	}
	*pending = map[string]engine.Doc{}
	return fn(engine.DocBatch{Partition: p, Docs: docs, Checkpoint: cp, Replay: true})
}

// BenchmarkUniformRestore measures the store's side of a full restore of
// the movie job after a uniform run (benchDocs movies, then 40% as many
// updates) into an empty table, with the bulk-load memory of a process
// at the default memory target: the pinned write cache cannot hold every
// movie, so the later buffers read the keys it does not hold.
//
//	go test -run '^$' -bench BenchmarkUniformRestore -benchtime 1x -timeout 30m ./docstore
func BenchmarkUniformRestore(b *testing.B) {
	n := benchDocs()
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "store")
	for b.Loop() {
		_ = os.RemoveAll(dir)
		s, err := Open(dir, WithBulkMemory(benchBulkMemory))
		if err != nil {
			b.Fatal(err)
		}
		tb := mustTable(b, s, movies.Spec)
		epochs := map[int32]int64{}
		start, cpu0 := time.Now(), cpuTime()
		records, err := uniformRestoreLog(n, func(batch engine.DocBatch) error {
			if _, ok := epochs[batch.Partition]; !ok {
				e, err := tb.Claim(ctx, batch.Partition)
				if err != nil {
					return err
				}
				epochs[batch.Partition] = e
			}
			batch.Epoch = epochs[batch.Partition]
			return tb.Apply(ctx, batch)
		})
		if err != nil {
			b.Fatal(err)
		}
		if _, ok, err := tb.Checkpoint(ctx, 2); err != nil || !ok {
			b.Fatalf("checkpoint after the restore: %v, %v", ok, err)
		}
		took, cpu := time.Since(start), cpuTime()-cpu0
		ingests, reads := s.counts.ingests.Load(), s.counts.writeReads.Load()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(records)/took.Seconds(), "records/s")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(records)/1e3, "cpu-µs/record")
		b.ReportMetric(float64(ingests), "ingests")
		b.ReportMetric(float64(reads), "reads")
	}
}
