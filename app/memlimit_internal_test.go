package app

import (
	"errors"
	"testing"
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
