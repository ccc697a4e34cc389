package app

import (
	"errors"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestPlanMemory checks how --memory-limit-mib, a container's limit and
// the store's off-heap memory make Go's soft limit.
func TestPlanMemory(t *testing.T) {
	clover := Default()
	clover.Store = StoreClover
	clover.StoreCacheMiB = 32
	redis := Default()
	redis.Store = StoreRedis
	bigCache := clover
	bigCache.StoreCacheMiB = 512
	with := func(c Config, mib int64) Config { c.MemoryLimitMiB = mib; return c }
	for _, tc := range []struct {
		name      string
		c         Config
		container int64
		offHeap   bool
		want      memoryPlan
		wantErr   bool
	}{
		{"automatic, no container limit: the elastic default target", with(clover, 0), 0, true, memoryPlan{totalMiB: 300, goMiB: 300 - 144 - 9, offHeap: 144, headroom: 9, source: "default"}, false},
		{"default target, redis", with(redis, 0), 0, true, memoryPlan{totalMiB: 300, goMiB: 300 - 48 - 9, offHeap: 48, headroom: 9, source: "default"}, false},
		{"default target grows to hold a large store cache", with(bigCache, 0), 0, true, memoryPlan{totalMiB: 710, goMiB: 710 - 624 - 21, offHeap: 624, headroom: 21, source: "default"}, false},
		{"a large store cache under a set limit: refused", with(bigCache, 300), 0, true, memoryPlan{}, true},
		{"automatic, container limit", with(clover, 0), 1000, true, memoryPlan{totalMiB: 900, goMiB: 900 - 144 - 27, offHeap: 144, headroom: 27, source: "container"}, false},
		{"flag over container", with(clover, 300), 1000, true, memoryPlan{totalMiB: 300, goMiB: 300 - 144 - 9, offHeap: 144, headroom: 9, source: "flag"}, false},
		{"none over container", with(clover, -1), 1000, true, memoryPlan{source: "none"}, false},
		{"no cgo: the cache is in Go's heap", with(clover, 300), 0, false, memoryPlan{totalMiB: 300, goMiB: 300 - 48 - 9, offHeap: 48, headroom: 9, source: "flag"}, false},
		{"redis holds nothing off heap", with(redis, 300), 0, true, memoryPlan{totalMiB: 300, goMiB: 300 - 48 - 9, offHeap: 48, headroom: 9, source: "flag"}, false},
		{"too small for the store", with(clover, 150), 0, true, memoryPlan{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planMemory(tc.c, tc.container, tc.offHeap)
			if tc.wantErr {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("planMemory = %+v, %v; want ErrConfig", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("planMemory = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestCacheBudgetDocs checks --cache-budget-docs: the operator's value
// wins, -1 and an explicit --cache-max-docs turn it off, the default is the
// engine's without a memory limit, a limit lowers it to a share of Go's
// memory within bounds, and jobs split it. The 300 MiB clover case is the
// one measured (docs/benchmarks.md): about 5000 per partition of three
// kept a 1M-movie run's throughput.
func TestCacheBudgetDocs(t *testing.T) {
	clover300 := Default()
	clover300.MemoryLimitMiB = 300
	p, err := planMemory(clover300, 0, true)
	if err != nil {
		t.Fatalf("planMemory(300 MiB clover): %v", err)
	}
	def := engine.DefaultConfig().CacheBudgetDocs
	for _, tc := range []struct {
		name            string
		budget, maxDocs int
		goLimit         int64
		jobs            int
		want            int
	}{
		{"set wins without a limit", 500, 0, 0, 1, 500},
		{"set wins under a limit", 90_000, 0, 64 << 20, 1, 90_000},
		{"set wins over cache-max-docs", 500, 100, 0, 1, 500},
		{"-1: none", -1, 0, 64 << 20, 1, 0},
		{"cache-max-docs alone: none", 0, 50_000, 64 << 20, 1, 0},
		{"no limit: the engine's default", 0, 0, 0, 1, def},
		{"no limit, two jobs: split", 0, 0, 0, 2, def / 2},
		{"300 MiB clover", 0, 0, p.goMiB << 20, 1, int(p.goMiB) * cacheDocsPerGoMiB},
		{"large limit: capped at the default", 0, 0, 4 << 30, 1, def},
		{"tiny limit: floored", 0, 0, 8 << 20, 1, minAutoCacheBudgetDocs},
		{"many jobs: at least a partition's floor", 0, 0, 8 << 20, 100, engine.MinPartitionCacheDocs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cacheBudgetDocs(tc.budget, tc.maxDocs, tc.goLimit, tc.jobs); got != tc.want {
				t.Errorf("cacheBudgetDocs(%d, %d, %d MiB, %d jobs) = %d; want %d", tc.budget, tc.maxDocs, tc.goLimit>>20, tc.jobs, got, tc.want)
			}
		})
	}
	if got := cacheBudgetDocs(0, 0, p.goMiB<<20, 1) / 3; got < 4000 || got > 6000 {
		t.Errorf("300 MiB clover: %d documents per partition of three; want about 5000, the value measured to keep the throughput", got)
	}
	ec := Default().EngineConfig(nil)
	if got, want := ec.CacheMaxDocs, engine.DefaultConfig().CacheMaxDocs; got != want {
		t.Errorf("Default().EngineConfig().CacheMaxDocs = %d; want the engine's default %d", got, want)
	}
	if got := ec.CacheBudgetDocs; got != def {
		t.Errorf("Default().EngineConfig().CacheBudgetDocs = %d; want the engine's default %d", got, def)
	}
}

// TestTrimValve checks where the C allocator's valve opens: at 90 % of a
// memory limit with clover, and never without a limit or with Redis
// (nothing of Pebble's in the process).
func TestTrimValve(t *testing.T) {
	clover, redis := Default(), Default()
	redis.Store = StoreRedis
	limit := memoryPlan{totalMiB: 300, goMiB: 115, source: "flag"}
	for _, tc := range []struct {
		name string
		c    Config
		p    memoryPlan
		want int64
	}{
		{"clover under 300 MiB", clover, limit, 270 << 20},
		{"clover without a limit", clover, memoryPlan{source: "none"}, 0},
		{"redis under 300 MiB", redis, limit, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got int64
			if b := trimValve(tc.c, tc.p, nil).Bound; b != nil {
				got = b.Load()
			}
			if got != tc.want {
				t.Errorf("valve bound = %d MiB; want %d", got>>20, tc.want>>20)
			}
		})
	}
}
