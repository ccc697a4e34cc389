package app_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestE2EZombieFencing pauses an instance (SIGSTOP) past its session
// timeout while ratings flow, so its partitions move to the other one,
// then resumes it (SIGCONT): its late writes to the shared Redis store are
// refused (fenced) and every count ends exact.
func TestE2EZombieFencing(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a process past its session timeout")
	}
	cc := newChildCluster(t)
	useRedis(t, &cc.cfg)
	a, b := cc.newInstance("a", false), cc.newInstance("b", false)
	// a flushes rarely, so it surely holds unflushed state when it is paused:
	// the writes it attempts when it wakes up are the zombie writes.
	a.extraArgs = []string{"--commit-interval", "30s", "--cache-max-docs", "1000000"}
	for _, in := range []*crashInstance{a, b} {
		cc.start(in)
	}
	for _, in := range []*crashInstance{a, b} {
		cc.waitReady(in, 60*time.Second)
	}

	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	p := produceConfig(cc.cfg, 20000, 400, 21)
	p.Rate = 1500
	truthOf(p, truth, sums)
	produced := make(chan error, 1)
	go func() { _, err := app.Produce(context.Background(), p, nil); produced <- err }()

	testkit.Eventually(t, 30*time.Second, "a is processing", func() error {
		st, err := stats(a.api)
		if err != nil {
			return err
		}
		if st.Stats.RecordsProcessed < 500 || st.Stats.PartitionsAssigned == 0 {
			return fmt.Errorf("a: %+v", st.Stats)
		}
		return nil
	})
	if err := a.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// b takes a's partitions once a's 3 s session timed out.
	testkit.Eventually(t, 30*time.Second, "b owns every partition", func() error {
		st, err := stats(b.api)
		if err != nil {
			return err
		}
		if st.Stats.PartitionsRunning != 3 {
			return fmt.Errorf("b runs %d partitions", st.Stats.PartitionsRunning)
		}
		return nil
	})
	if err := a.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var fenced int64
	testkit.Eventually(t, 30*time.Second, "the zombie's writes are fenced", func() error {
		st, err := stats(a.api)
		if err != nil {
			return err
		}
		if fenced = st.Stats.FencedWrites; fenced == 0 {
			return fmt.Errorf("a: %+v", st.Stats)
		}
		return nil
	})
	t.Logf("zombie a had %d writes fenced", fenced)
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	testkit.Eventually(t, 90*time.Second, "exact counts", func() error {
		got, err := allMovies(b.api)
		if err != nil {
			return err
		}
		return sameMovies(got, truth)
	})
}
