package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// memoryMovies is the movies BenchmarkMovieMemory writes.
const memoryMovies = 100_000

// BenchmarkMovieMemory writes memoryMovies movies of the movie job's table
// (without its stream) on one server and on a cluster, and reports the
// growth of used_memory (INFO memory) of the node holding the table per
// movie: bytes/movie. Run it with -benchtime=1x.
func BenchmarkMovieMemory(b *testing.B) {
	b.Run("single", func(b *testing.B) {
		r := testkit.StartRedis(b)
		benchMovieMemory(b, ModeSingle, r.URL())
	})
	b.Run("cluster", func(b *testing.B) {
		c := testkit.SharedRedisCluster(b)
		benchMovieMemory(b, ModeCluster, c.URL())
	})
}

func benchMovieMemory(b *testing.B, mode Mode, url string) {
	ctx := context.Background()
	for range b.N {
		s := openModeStore(b, mode, url)
		tb := openTable(b, s, movieTableSpec)
		node := redis.Cmdable(s.client)
		if cc, ok := s.client.(*redis.ClusterClient); ok {
			m, err := cc.MasterForKey(ctx, tb.keys.spec(0))
			if err != nil {
				b.Fatal(err)
			}
			node = m
		}
		before := usedBytes(b, node)
		const parts = 8
		for p := range int32(parts) {
			e, err := tb.Claim(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			batch := make([]engine.Doc, 0, batchSize)
			for id := int64(p); id < memoryMovies; id += parts {
				batch = append(batch, movieDoc(id, p, 10+id%50, float64(30+id%20)*(10+float64(id%50)), 1))
				if len(batch) == batchSize || id+parts >= memoryMovies {
					if err := tb.Apply(ctx, engine.DocBatch{Partition: p, Epoch: e, Docs: batch, Checkpoint: id}); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
		}
		after := usedBytes(b, node)
		b.ReportMetric(float64(after-before)/memoryMovies, "bytes/movie")
		b.StopTimer()
		if err := tb.Reset(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// usedBytes returns used_memory of node.
func usedBytes(b *testing.B, node redis.Cmdable) int64 {
	b.Helper()
	info, err := node.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}
