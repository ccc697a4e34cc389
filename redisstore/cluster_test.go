package redisstore

import (
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/storetest"
	"github.com/keepstate/keepstate/internal/testkit"
)

// openModeStore opens a store in mode at url under a fresh prefix and
// closes it when the test ends.
func openModeStore(t testing.TB, mode Mode, url string, opts ...Option) *Store {
	t.Helper()
	opts = append([]Option{WithMode(mode), WithPrefix(uniquePrefix())}, opts...)
	s, err := Open(ctxT(t), url, opts...)
	if err != nil {
		t.Fatalf("Open(%s, %s): %v", mode, url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestTablesConformanceCluster runs the shared table suite on a Redis
// Cluster (three masters, three replicas) shared by the package's tests.
func TestTablesConformanceCluster(t *testing.T) {
	c := testkit.SharedRedisCluster(t)
	storetest.RunTables(t, func(t *testing.T) engine.Tables { return openModeStore(t, ModeCluster, c.URL()) })
}

// TestTablesConformanceSentinel runs the shared table suite on a master
// found through three Sentinels.
func TestTablesConformanceSentinel(t *testing.T) {
	s := testkit.SharedRedisSentinel(t)
	storetest.RunTables(t, func(t *testing.T) engine.Tables { return openModeStore(t, ModeSentinel, s.URL()) })
}
