package docstore

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// BenchmarkTableLoadApplyConcurrent runs two partitions of a table side by
// side as the engine does for documents its cache dropped: each Loads 64
// random keys of its own and then writes them one version later, through
// a write cache of 500 keys (of 4000), so that one partition's writes
// evict while the other's Loads are in flight. reads/doc is the share of
// written documents Apply still had to read: what the Loads taught the
// write cache saves the rest. One iteration is one round of both
// partitions.
func BenchmarkTableLoadApplyConcurrent(b *testing.B) {
	s := openTemp(b, WithFsync(false), WithWriteCache(500))
	defer s.Close()
	tb := mustTable(b, s, ordersSpec)
	ctx := context.Background()
	const keys, batch = 4000, 64
	epochs := make([]int64, 2)
	for p := range epochs {
		e, err := tb.Claim(ctx, int32(p))
		if err != nil {
			b.Fatal(err)
		}
		epochs[p] = e
	}
	version := make([]int64, keys)
	rounds := make(chan int)
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(p), 6))
			for i := range rounds {
				docs := make([]engine.Doc, 0, batch)
				ks := make([][]byte, 0, batch)
				for _, k := range r.Perm(keys / 2)[:batch] {
					k = 2*k + p // each partition its own keys
					version[k]++
					d := orderDoc(k, int32(p), version[k])
					docs, ks = append(docs, d), append(ks, d.Key)
				}
				if _, err := tb.Load(ctx, ks); err != nil {
					errs <- err
					return
				}
				if err := tb.Apply(ctx, engine.DocBatch{Partition: int32(p), Epoch: epochs[p], Docs: docs, Checkpoint: int64(i + 1)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	reads := s.counts.writeReads.Load()
	b.ResetTimer()
	for i := range b.N {
		rounds <- i
		rounds <- i
	}
	close(rounds)
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(s.counts.writeReads.Load()-reads)/float64(2*batch*b.N), "reads/doc")
}
