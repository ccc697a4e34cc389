package docstore

import (
	"context"
	"testing"
	"time"

	"github.com/keepstate/keepstate/movies"
)

// BenchmarkDropPartition measures DropPartition of one partition of a
// table of the movie job's spec restored with benchDocs movies over three
// partitions, reopened (as a restart leaves it: the write cache filled
// from the documents up to its bound; open+warm-ms is how long opening
// the table and its warm-up took). A drop reads every document of the
// partition for its index values (the write cache does not serve drops).
// "cache" drops with the write cache as the warm-up filled it, "cold" with
// it emptied first. Each round restores a new store; only the drop is
// timed. Numbers in docs/benchmarks.md ("Store and engine
// microbenchmarks"):
//
//	go test -run '^$' -bench BenchmarkDropPartition -benchtime 1x ./docstore
func BenchmarkDropPartition(b *testing.B) {
	ctx := context.Background()
	for _, cold := range []bool{false, true} {
		b.Run(map[bool]string{false: "cache", true: "cold"}[cold], func(b *testing.B) {
			n := benchDocs()
			var total, warm time.Duration
			for b.Loop() {
				b.StopTimer()
				dir := b.TempDir()
				s, err := Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				if err := restoreTable(ctx, mustTable(b, s, movies.Spec), n); err != nil {
					b.Fatal(err)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				w0 := time.Now()
				if s, err = Open(dir); err != nil {
					b.Fatal(err)
				}
				tb := mustTable(b, s, movies.Spec)
				<-tb.cache.warmed
				warm += time.Since(w0)
				if cold {
					s.wmu.Lock()
					s.tcache.clear(tb.cache)
					s.wmu.Unlock()
				}
				reads := s.counts.docGets.Load()
				b.StartTimer()
				t0 := time.Now()
				if err := tb.DropPartition(ctx, 0); err != nil {
					b.Fatal(err)
				}
				total += time.Since(t0)
				b.StopTimer()
				b.ReportMetric(float64(s.counts.docGets.Load()-reads), "reads/drop")
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/drop")
			b.ReportMetric(float64(warm.Milliseconds())/float64(b.N), "open+warm-ms")
		})
	}
}
