package redisstore

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keepstate/keepstate/internal/testkit"
)

// The benchmarks share one redis-server per test process.
var shared struct {
	mu    sync.Mutex
	redis *testkit.Redis
}

// batchSize is the documents per batch of the benchmarks.
const batchSize = 1000

func sharedRedis(b *testing.B) *testkit.Redis {
	b.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.redis == nil {
		r, err := testkit.LaunchRedis()
		if errors.Is(err, testkit.ErrRedisMissing) {
			testkit.Missing(b, "redis-server", testkit.RedisInstall)
		}
		if err != nil {
			b.Fatalf("launch redis-server: %v", err)
		}
		shared.redis = r
	}
	return shared.redis
}

// closeShared stops the shared server (from TestMain).
func closeShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.redis != nil {
		_ = shared.redis.Close()
	}
}

// serverCPU is the CPU time redis-server has used so far, in seconds
// (INFO cpu: user plus system), for per-document server costs.
func serverCPU(ctx context.Context, s *Store) float64 {
	info, err := s.client.Info(ctx, "cpu").Result()
	if err != nil {
		return math.NaN()
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}

// reportServerCPU reports the server's CPU per document since cpu0.
func reportServerCPU(ctx context.Context, b *testing.B, s *Store, cpu0 float64, docs int) {
	b.ReportMetric((serverCPU(ctx, s)-cpu0)*1e6/float64(docs), "server-µs/doc")
}

// latencies records per-operation durations and reports percentiles.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	at := func(q float64) float64 {
		return float64(l[min(len(l)-1, int(q*float64(len(l))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// usedMemory picks used_memory_human out of INFO memory.
func usedMemory(info string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory_human:"); ok {
			return "redis used_memory " + v
		}
	}
	return "redis used_memory unknown"
}
