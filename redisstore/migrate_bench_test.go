package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"
)

// BenchmarkMigrate1M migrates bigMovies movies, written by the movie
// layout's Apply over bigPartitions partitions, into the movie table; one
// op is one whole migration (run it with -benchtime=1x).
func BenchmarkMigrate1M(b *testing.B) {
	r := sharedRedis(b)
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		prefix := uniquePrefix()
		s, err := Open(ctx, r.URL(), WithPrefix(prefix), WithStreamMaxLen(0))
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, bigPartitions)
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
				b.Fatal(err)
			}
		}
		cpu0 := serverCPU(ctx, s)
		b.StartTimer()
		start := time.Now()
		tb, err := s.OpenTable(ctx, movieTableSpec)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		b.StopTimer()
		b.ReportMetric(took.Seconds(), "migrate-s")
		b.ReportMetric(bigMovies/took.Seconds(), "movies/s")
		b.ReportMetric((serverCPU(ctx, s)-cpu0)*1e6/bigMovies, "server-µs/movie")
		n := s.client.SCard(ctx, tb.(*table).keys.members(3)).Val()
		if n != bigMovies/bigPartitions {
			b.Fatalf("partition 3 has %d movies after the migration, want %d", n, bigMovies/bigPartitions)
		}
		_ = tb.(*table).Reset(ctx)
		_ = s.Close()
		b.StartTimer()
	}
}
