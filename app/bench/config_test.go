package bench

import (
	"slices"
	"strings"
	"testing"
)

// TestRedisMode: --redis-mode is validated as app.Config does it, and the
// children run with it.
func TestRedisMode(t *testing.T) {
	for _, tc := range []struct {
		mode string
		ok   bool
	}{{"", true}, {"single", true}, {"cluster", true}, {"sentinel", true}, {"clustre", false}} {
		c := Default()
		c.Binary, c.RedisMode = "keepstate", tc.mode
		err := c.Validate()
		if (err == nil) != tc.ok || !tc.ok && !strings.Contains(err.Error(), "--redis-mode") {
			t.Errorf("Validate with --redis-mode %q = %v; want ok %v", tc.mode, err, tc.ok)
		}
	}
	c := Default()
	c.RedisMode = "cluster"
	b := &bench{cfg: c, work: t.TempDir()}
	args := b.childArgs(0)
	if i := slices.Index(args, "--redis-mode"); i < 0 || i+1 >= len(args) || args[i+1] != "cluster" {
		t.Fatalf("child args %v; want --redis-mode cluster", args)
	}
}
