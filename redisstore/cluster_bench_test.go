package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// memoryMovies is the movies BenchmarkMovieMemory writes.
const memoryMovies = 100_000

// BenchmarkMovieMemory writes memoryMovies movies of the movie job's table
// (without its stream, over 8 partitions by engine.PartitionFor) on one
// server and on a cluster, and reports the growth of used_memory (INFO
// memory, summed over the cluster's masters) per movie: bytes/movie, and
// the same without the growth of the replication backlog (at most 1 MB
// per master by default): no-backlog-bytes/movie. Run it with
// -benchtime=1x.
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
	const parts = 8
	spec := movieTableSpec
	spec.Partitions = parts
	byPart := make([][]int64, parts)
	for id := range int64(memoryMovies) {
		p := engine.PartitionFor(movieKey(id), parts)
		byPart[p] = append(byPart[p], id)
	}
	for range b.N {
		s := openModeStore(b, mode, url)
		tb := openTable(b, s, spec)
		before, backlogBefore := usedBytes(b, s.client)
		for p, ids := range byPart {
			p := int32(p)
			e, err := tb.Claim(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			for start := 0; start < len(ids); start += batchSize {
				batch := make([]engine.Doc, 0, batchSize)
				for _, id := range ids[start:min(start+batchSize, len(ids))] {
					batch = append(batch, movieDoc(id, p, 10+id%50, float64(30+id%20)*(10+float64(id%50)), 1))
				}
				if err := tb.Apply(ctx, engine.DocBatch{Partition: p, Epoch: e, Docs: batch, Checkpoint: int64(start)}); err != nil {
					b.Fatal(err)
				}
			}
		}
		after, backlogAfter := usedBytes(b, s.client)
		b.ReportMetric(float64(after-before)/memoryMovies, "bytes/movie")
		b.ReportMetric(float64(after-before-(backlogAfter-backlogBefore))/memoryMovies, "no-backlog-bytes/movie")
		b.StopTimer()
		if err := tb.Reset(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// usedBytes returns used_memory of the server, or the sum of the
// cluster's masters', and the part of it that is replication backlog
// (mem_replication_backlog: bounded by repl-backlog-size per master,
// whatever the data).
func usedBytes(b *testing.B, c redis.UniversalClient) (used, backlog int64) {
	b.Helper()
	var mu sync.Mutex
	add := func(ctx context.Context, node redis.Cmdable) error {
		u, bl, err := nodeUsedBytes(ctx, node)
		mu.Lock()
		defer mu.Unlock()
		used, backlog = used+u, backlog+bl
		return err
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error { return add(ctx, node) })
	} else {
		err = add(context.Background(), c)
	}
	if err != nil {
		b.Fatal(err)
	}
	return used, backlog
}

// nodeUsedBytes returns used_memory and mem_replication_backlog of node.
func nodeUsedBytes(ctx context.Context, node redis.Cmdable) (used, backlog int64, err error) {
	info, err := node.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, err
	}
	found := false
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			if used, err = strconv.ParseInt(v, 10, 64); err != nil {
				return 0, 0, err
			}
			found = true
		}
		if v, ok := strings.CutPrefix(line, "mem_replication_backlog:"); ok {
			if backlog, err = strconv.ParseInt(v, 10, 64); err != nil {
				return 0, 0, err
			}
		}
	}
	if !found {
		return 0, 0, errors.New("no used_memory in INFO memory")
	}
	return used, backlog, nil
}
