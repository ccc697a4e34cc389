package redisstore

import (
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/storetest"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestConformance runs the shared store suite; every sub-test gets an empty
// store under its own prefix on one redis-server.
func TestConformance(t *testing.T) {
	r := testkit.StartRedis(t)
	storetest.Run(t, func(t *testing.T) engine.Store { return openStore(t, r) })
}
