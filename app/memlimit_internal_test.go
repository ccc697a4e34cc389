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
	with := func(c Config, mib int64) Config { c.MemoryLimitMiB = mib; return c }
	for _, tc := range []struct {
		name      string
		c         Config
		container int64
		offHeap   bool
		want      memoryPlan
		wantErr   bool
	}{
		{"automatic, no container limit", with(clover, 0), 0, true, memoryPlan{source: "none"}, false},
		{"automatic, container limit", with(clover, 0), 1000, true, memoryPlan{totalMiB: 900, goMiB: 900 - 144, offHeap: 144, source: "container"}, false},
		{"flag over container", with(clover, 300), 1000, true, memoryPlan{totalMiB: 300, goMiB: 300 - 144, offHeap: 144, source: "flag"}, false},
		{"none over container", with(clover, -1), 1000, true, memoryPlan{source: "none"}, false},
		{"no cgo: the cache is in Go's heap", with(clover, 300), 0, false, memoryPlan{totalMiB: 300, goMiB: 300 - 48, offHeap: 48, source: "flag"}, false},
		{"redis holds nothing off heap", with(redis, 300), 0, true, memoryPlan{totalMiB: 300, goMiB: 300 - 48, offHeap: 48, source: "flag"}, false},
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

// TestCacheMaxDocs checks --cache-max-docs: the operator's value wins, the
// default is the engine's without a memory limit, and a limit lowers it to
// a share of Go's memory within bounds. The 300 MiB clover case is the one
// measured (docs/benchmarks.md): 5000 kept a 1M-movie run's throughput.
func TestCacheMaxDocs(t *testing.T) {
	clover300 := Default()
	clover300.MemoryLimitMiB = 300
	p, err := planMemory(clover300, 0, true)
	if err != nil {
		t.Fatalf("planMemory(300 MiB clover): %v", err)
	}
	for _, tc := range []struct {
		name    string
		set     int
		goLimit int64
		want    int
	}{
		{"set wins without a limit", 250, 0, 250},
		{"set wins under a limit", 50_000, 64 << 20, 50_000},
		{"no limit: the engine's default", 0, 0, engine.DefaultConfig().CacheMaxDocs},
		{"300 MiB clover", 0, p.goMiB << 20, int(p.goMiB) * cacheDocsPerGoMiB},
		{"large limit: capped at the default", 0, 4 << 30, engine.DefaultConfig().CacheMaxDocs},
		{"tiny limit: floored", 0, 8 << 20, minAutoCacheMaxDocs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cacheMaxDocs(tc.set, tc.goLimit); got != tc.want {
				t.Errorf("cacheMaxDocs(%d, %d MiB) = %d; want %d", tc.set, tc.goLimit>>20, got, tc.want)
			}
		})
	}
	if got := cacheMaxDocs(0, p.goMiB<<20); got < 4000 || got > 6000 {
		t.Errorf("300 MiB clover: cache-max-docs %d; want about 5000, the value measured to keep the throughput", got)
	}
	if got, want := Default().EngineConfig(nil).CacheMaxDocs, engine.DefaultConfig().CacheMaxDocs; got != want {
		t.Errorf("Default().EngineConfig().CacheMaxDocs = %d; want the engine's default %d", got, want)
	}
}
