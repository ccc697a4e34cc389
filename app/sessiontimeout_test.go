package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestSessionTimeoutOutsideBrokerRange: a --session-timeout the brokers
// refuse (below group.min.session.timeout.ms) stops Run with an error that
// names the flag and the broker settings, instead of retrying forever.
func TestSessionTimeoutOutsideBrokerRange(t *testing.T) {
	k := testkit.StartKfake(t, testkit.WithKfakeOpts(kfake.GroupMinSessionTimeout(6*time.Second)))
	reg := testkit.StartRegistry(t)
	c := testConfig(t, k.Brokers(), reg.URL())
	c.SessionTimeout = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := app.Run(ctx, c, testLogger(t, c.ApplicationID), nil)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Run = %v (context %v); want an error before the deadline", err, ctx.Err())
	}
	for _, want := range []string{"--session-timeout=3s", "group.min.session.timeout.ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run = %q; want it to name %q", err, want)
		}
	}
}
