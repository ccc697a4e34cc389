package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// The data set of BenchmarkMigrate1M: bigMovies movies of the movie
// layout over bigPartitions partitions.
const (
	bigMovies     = 1_000_000
	bigPartitions = 8
)

// legacyRank is the by-avg member of a movie in the movie layout: 16 hex
// digits of the average (descending), 16 of the id (ascending), ":" and
// the decimal id.
func legacyRank(avg float64, id int64) string {
	return fmt.Sprintf("%016x%016x:%d", ^orderedBits(avg), uint64(id)^(1<<63), id)
}

// writeLegacyPartition writes the movies of partition p (ids p, p+parts,
// ... below n) in the movie layout under prefix, as its Apply left them:
// per movie the hash <prefix>movie:<id>, its by-avg member and its
// membership in <prefix>partition:<p>:members, then the partition's
// epoch, checkpoint and batch token. Averages are spread over 0..10 with
// many ties. Writes are pipelined, batchSize movies per round trip.
func writeLegacyPartition(ctx context.Context, c redis.UniversalClient, prefix string, p int32, parts, n int64) error {
	rng := rand.New(rand.NewPCG(uint64(p), 1))
	old := legacyKeys{prefix: prefix}
	members := old.partition(p, "members")
	part := strconv.Itoa(int(p))
	pipe := c.Pipeline()
	for id := int64(p); id < n; id += parts {
		count := rng.Int64N(50) + 1
		sum := 0.0
		for range count {
			sum += float64(rng.IntN(11))
		}
		avg := sum / float64(count)
		r := legacyRank(avg, id)
		ids := strconv.FormatInt(id, 10)
		pipe.HSet(ctx, old.movies()+ids, "id", ids, "count", formatInt(count), "sum", strconv.FormatFloat(sum, 'g', -1, 64),
			"avg", strconv.FormatFloat(avg, 'g', -1, 64), "partition", part, "version", "1", "sources", part+":1", "rank", r)
		pipe.ZAdd(ctx, old.byAvg(), redis.Z{Member: r})
		pipe.SAdd(ctx, members, ids)
		if pipe.Len() >= 3*batchSize {
			if _, err := pipe.Exec(ctx); err != nil {
				return fmt.Errorf("write movies of partition %d: %w", p, err)
			}
		}
	}
	pipe.Set(ctx, old.partition(p, "epoch"), "3", 0)
	pipe.Set(ctx, old.partition(p, "checkpoint"), formatInt(n), 0)
	pipe.Set(ctx, old.partition(p, "batch"), "token-"+part, 0)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("write partition %d: %w", p, err)
	}
	return nil
}

// BenchmarkMigrate1M migrates bigMovies movies of the movie layout,
// written directly over bigPartitions partitions, into the movie table;
// one op is one whole migration (run it with -benchtime=1x).
func BenchmarkMigrate1M(b *testing.B) {
	r := sharedRedis(b)
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		prefix := uniquePrefix()
		s, err := Open(ctx, r.URL(), WithPrefix(prefix))
		if err != nil {
			b.Fatal(err)
		}
		var g errgroup.Group
		for p := range int32(bigPartitions) {
			g.Go(func() error { return writeLegacyPartition(ctx, s.client, prefix, p, bigPartitions, bigMovies) })
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
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
