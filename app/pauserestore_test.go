package app_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestE2EPausedDuringRestore pauses (SIGSTOP) an instance in the middle of
// replaying the changelog into a new store (its warm-ups, which a joining
// instance catches up before it is given actives, or a restore), until its
// session times out and the other instance runs every partition again;
// ratings arrive meanwhile. Resumed, the paused instance wakes up inside a
// replay of partitions it does not own, rejoins and takes its share: every
// rating is counted exactly once in the API of both instances, in the last
// changelog record per movie and in the output topic.
func TestE2EPausedDuringRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and pauses child processes")
	}
	const movies = 40000
	cc := newChildCluster(t)
	c := cc.cfg
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	produce := producerInto(t, c, movies, truth, sums)
	a := cc.launch("a", true)
	produce(movies, 71)
	waitOutputsExact(t, c, "http://"+a.api, truth, "before b joins")

	// b joins with a new store and replays the partitions it is given
	// (as warm-ups) from the changelog; it is paused the moment it has
	// replayed some records and not yet run every partition it will get.
	b := cc.newInstance("b", true)
	cc.start(b)
	var caught string
	deadline := time.Now().Add(60 * time.Second)
	for caught == "" {
		st, err := stats(b.api)
		replayed := st.Stats.ChangelogRestored + st.Stats.StandbyRecords
		if err == nil && replayed > 0 && (st.Stats.PartitionsAssigned == 0 || st.Stats.PartitionsRunning < st.Stats.PartitionsAssigned) {
			if err := b.proc.Signal(syscall.SIGSTOP); err != nil {
				t.Fatalf("SIGSTOP b: %v", err)
			}
			caught = fmt.Sprintf("%d changelog records restored, %d read by standbys, %d of %d partitions running",
				st.Stats.ChangelogRestored, st.Stats.StandbyRecords, st.Stats.PartitionsRunning, st.Stats.PartitionsAssigned)
			break
		}
		if err == nil && st.Stats.PartitionsAssigned > 0 && st.Stats.PartitionsRunning == st.Stats.PartitionsAssigned {
			t.Fatalf("b finished replaying %d records before the pause struck; the test needs a longer replay", replayed)
		}
		if time.Now().After(deadline) || b.proc.Exited() {
			t.Fatalf("b did not start restoring within 60s (exited: %v, stats: %+v, %v)", b.proc.Exited(), st.Stats, err)
		}
		time.Sleep(2 * time.Millisecond) // polling interval
	}
	resumed := false
	defer func() {
		if !resumed { // a failed test leaves no stopped process behind
			_ = b.proc.Signal(syscall.SIGCONT)
		}
	}()
	// The process is stopped: its log is what it had done when paused.
	restoredBefore := strings.Count(b.proc.Output(), "partition restored")
	t.Logf("paused b in its restore: %s (%d partitions logged restored)", caught, restoredBefore)

	testkit.Eventually(t, 60*time.Second, "a runs every partition while b is paused", func() error {
		st, err := stats(a.api)
		if err == nil && st.Stats.PartitionsRunning != 3 {
			err = fmt.Errorf("a runs %d partitions", st.Stats.PartitionsRunning)
		}
		return err
	})
	produce(8000, 72) // counted by a while b sleeps
	waitOutputsExact(t, c, "http://"+a.api, truth, "while b is paused")

	resumed = true
	if err := b.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT b: %v", err)
	}
	// b rejoins (a rebalance that takes seconds on a real broker) and
	// gets its share back, restoring it on top of what its paused restore
	// left in its store.
	testkit.Eventually(t, 120*time.Second, "b runs its share again, and a the rest", func() error {
		sa, err := stats(a.api)
		if err != nil {
			return err
		}
		sb, err := stats(b.api)
		if err != nil {
			return err
		}
		if sb.Stats.PartitionsRunning == 0 || sa.Stats.PartitionsRunning+sb.Stats.PartitionsRunning != 3 {
			return fmt.Errorf("a runs %d partitions, b %d; want b at least one and 3 in all", sa.Stats.PartitionsRunning, sb.Stats.PartitionsRunning)
		}
		return nil
	})
	produce(8000, 73) // split between a and b again
	for _, in := range []*crashInstance{a, b} {
		waitOutputsExact(t, c, "http://"+in.api, truth, "after b resumed, queried on "+in.name)
	}
}
