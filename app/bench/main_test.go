package bench_test

import (
	"testing"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestMain removes the keepstate binary testkit.Keepstate builds.
func TestMain(m *testing.M) { testkit.Main(m) }
