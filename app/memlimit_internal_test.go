package app

import (
	"errors"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestPlanMemory checks how --memory-limit-mib and a container's limit
// make Go's soft limit: everything the process caches is in Go's heap, so
// Go gets the limit less the binary (48 MiB) and 3 % headroom, whatever
// the store and its cache size.
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
		want      memoryPlan
		wantErr   bool
	}{
		{"automatic, no container limit: the elastic default target", with(clover, 0), 0, memoryPlan{totalMiB: 300, goMiB: 300 - 48 - 9, headroom: 9, source: "default"}, false},
		{"default target, redis", with(redis, 0), 0, memoryPlan{totalMiB: 300, goMiB: 300 - 48 - 9, headroom: 9, source: "default"}, false},
		{"a large store cache is Go's: the default target stays", with(bigCache, 0), 0, memoryPlan{totalMiB: 300, goMiB: 300 - 48 - 9, headroom: 9, source: "default"}, false},
		{"automatic, container limit", with(clover, 0), 1000, memoryPlan{totalMiB: 900, goMiB: 900 - 48 - 27, headroom: 27, source: "container"}, false},
		{"flag over container", with(clover, 300), 1000, memoryPlan{totalMiB: 300, goMiB: 300 - 48 - 9, headroom: 9, source: "flag"}, false},
		{"none over container", with(clover, -1), 1000, memoryPlan{source: "none"}, false},
		{"redis, flag", with(redis, 300), 0, memoryPlan{totalMiB: 300, goMiB: 300 - 48 - 9, headroom: 9, source: "flag"}, false},
		{"the least that leaves Go 64 MiB", with(clover, 115), 0, memoryPlan{totalMiB: 115, goMiB: 115 - 48 - 3, headroom: 3, source: "flag"}, false},
		{"one less: refused", with(clover, 114), 0, memoryPlan{}, true},
		{"a container too small: refused", with(clover, 0), 100, memoryPlan{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planMemory(tc.c, tc.container)
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
// memory within bounds, and jobs split it.
func TestCacheBudgetDocs(t *testing.T) {
	p, err := planMemory(Default(), 0)
	if err != nil || p.goMiB != 243 {
		t.Fatalf("planMemory(defaults) = %+v, %v; want 243 MiB for Go", p, err)
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
		{"the default target: 120 per MiB of Go's share", 0, 0, p.goMiB << 20, 1, 243 * 120},
		{"the default target, three jobs", 0, 0, p.goMiB << 20, 3, 243 * 120 / 3},
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
	ec := Default().EngineConfig(nil)
	if got, want := ec.CacheMaxDocs, engine.DefaultConfig().CacheMaxDocs; got != want {
		t.Errorf("Default().EngineConfig().CacheMaxDocs = %d; want the engine's default %d", got, want)
	}
	if got := ec.CacheBudgetDocs; got != def {
		t.Errorf("Default().EngineConfig().CacheBudgetDocs = %d; want the engine's default %d", got, def)
	}
}

// TestBulkMemory: the bulk load gets half of what Go's share leaves after
// Pebble's block cache (in Go's heap), never less than an eighth of the
// share, and nothing is bounded without a limit.
func TestBulkMemory(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name           string
		goLimit, cache int64
		want           int64
	}{
		{"no limit", 0, 64 * mib, 0},
		{"default target", 243 * mib, 64 * mib, (243 - 64) * mib / 2},
		{"cache larger than the share", 100 * mib, 200 * mib, 100 * mib / 4 / 2},
	}
	for _, tt := range tests {
		if got := bulkMemory(tt.goLimit, tt.cache); got != tt.want {
			t.Errorf("%s: bulkMemory(%d, %d) = %d, want %d", tt.name, tt.goLimit, tt.cache, got, tt.want)
		}
	}
}
