package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app/bench"
)

// TestBenchOrders runs `keepstate bench --job orders` on a tiny workload
// (in-process kfake, clover, this job's binary as the child): fill, run
// and a full restore, every customer exact after each.
func TestBenchOrders(t *testing.T) {
	b := bench.Default()
	b.Job, b.Binary = bench.JobOrders, ordersBinary(t)
	b.Movies, b.Ratings = 200, 2000
	b.Phases = []string{bench.PhaseFill, bench.PhaseRun, bench.PhaseRestore}
	b.WorkDir = t.TempDir()
	b.ChildArgs = []string{"--commit-interval=200ms"}
	b.Timeout = 2 * time.Minute
	var out bytes.Buffer
	b.Out = &out
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := bench.Run(ctx, b, nil)
	if err != nil {
		t.Fatalf("Run = %v\n%s", err, out.String())
	}
	if len(res.Phases) != 3 {
		t.Fatalf("got %d phases, want 3:\n%s", len(res.Phases), out.String())
	}
	for _, p := range res.Phases {
		if !p.Check.OK() || p.Check.Movies != 200 {
			t.Errorf("phase %s: check %s, want 200/200 exact", p.Phase, p.Check)
		}
	}
	if restore := res.Phases[2]; restore.Records < 200 || restore.Rate <= 0 {
		t.Errorf("restore phase restored %d changelog records at %v/s, want at least one per customer (200)", restore.Records, restore.Rate)
	}
	b.Phases = []string{bench.PhaseFill, bench.PhaseQuery}
	if _, err := bench.Run(ctx, b, nil); err == nil {
		t.Error("--job orders with the query phase: no error")
	}
}
