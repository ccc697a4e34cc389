package bench_test

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app/bench"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestBenchTiny runs `keepstate bench` end to end on a tiny workload (in-
// process kfake, clover, keepstate run as a child process, every phase), so
// the command keeps working. About 15 s with -race.
func TestBenchTiny(t *testing.T) {
	b := bench.Default()
	b.Binary = testkit.Keepstate(t)
	b.Movies, b.Ratings, b.Queries = 200, 2000, 400
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
	if len(res.Phases) != 5 {
		t.Fatalf("got %d phases, want 5:\n%s", len(res.Phases), out.String())
	}
	for _, p := range res.Phases {
		if !p.Check.OK() || p.Check.Movies != 200 {
			t.Errorf("phase %s: check %s, want 200/200 exact", p.Phase, p.Check)
		}
		if p.Seconds <= 0 || p.PeakRSSMiB <= 0 {
			t.Errorf("phase %s: seconds %v, peak RSS %v MiB: want both positive", p.Phase, p.Seconds, p.PeakRSSMiB)
		}
	}
	if run := res.Phases[1]; run.Records != 2000 || run.Rate <= 0 {
		t.Errorf("run phase: %d records at %v/s, want 2000 at a positive rate", run.Records, run.Rate)
	}
	if q := res.Phases[2]; q.Lookup == nil || q.Range == nil || q.Lookup.Count+q.Range.Count != 400 || q.Range.Count != 20 ||
		q.Lookup.P50Micros <= 0 || q.Lookup.P99Micros < q.Lookup.P50Micros {
		t.Errorf("query phase: lookup %+v, range %+v; want 380 lookups and 20 range queries with 0 < p50 <= p99", q.Lookup, q.Range)
	}
	if restore := res.Phases[4]; restore.Records < 200 {
		t.Errorf("restore phase restored %d changelog records, want at least one per movie (200)", restore.Records)
	}
	for _, want := range []string{"phase", "fill", "run", "query", "GET /movies/{id} p50", "restart", "restore", "200/200 exact"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBenchTwoInstances runs fill, run and query with two children in one
// group, one standby each: every movie exact through the first child's
// API, the group's CPU summed, each child's RSS and store size noted.
func TestBenchTwoInstances(t *testing.T) {
	b := bench.Default()
	b.Binary = testkit.Keepstate(t)
	b.Movies, b.Ratings, b.Queries = 200, 2000, 200
	b.Phases = []string{bench.PhaseFill, bench.PhaseRun, bench.PhaseQuery}
	b.Instances = 2
	b.WorkDir = t.TempDir()
	b.ChildArgs = []string{"--commit-interval=200ms", "--standby-replicas=1"}
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
	note := regexp.MustCompile(`instances' peak RSS [1-9][0-9]*/[1-9][0-9]* MiB, stores [0-9]+/[0-9]+ MiB`)
	for _, p := range res.Phases[:2] {
		if !p.Check.OK() || p.Check.Movies != 200 {
			t.Errorf("phase %s: check %s, want 200/200 exact", p.Phase, p.Check)
		}
		if !note.MatchString(p.Note) {
			t.Errorf("phase %s: note %q, want each instance's RSS and store size", p.Phase, p.Note)
		}
	}
	if !strings.Contains(res.Workload, "2 instances") {
		t.Errorf("workload %q does not say 2 instances", res.Workload)
	}
	b.Phases = []string{bench.PhaseFill, bench.PhaseRestore}
	if _, err := bench.Run(ctx, b, nil); err == nil {
		t.Error("2 instances with the restore phase: want a configuration error")
	}
}
