package engine_test

import (
	"fmt"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
)

// TestUnitStandbyOnMemberWithoutPartitions: a member given no partition
// to consume (more instances than partitions) still keeps the standby
// copies it is assigned, so that it takes the partition over with no
// replay when the active's member leaves. sarama sends a member the plan
// leaves out an assignment without user data, which dropped its standbys.
func TestUnitStandbyOnMemberWithoutPartitions(t *testing.T) {
	c := newCluster(t)
	cfg := unitConfig(c, engine.ExactlyOnce)
	a := newRig(t, c, cfg, memstore.New(memstore.Local())).start(t)
	eventually(t, "a runs the partition", owns(a.e, 0))
	first := []rating{{1, 5}, {2, 7}, {3, 9}}
	a.rate(t, 0, first...)
	eventually(t, "a stores the ratings", a.storeHas(totals(first)))

	cfgB := cfg
	cfgB.AdvertiseAddr = "127.0.0.1:7002"
	b := newRig(t, c, cfgB, memstore.New(memstore.Local())).start(t)
	eventually(t, "b keeps a caught-up standby copy of the partition", func() error {
		if n := b.e.Stats().PartitionsStandby; n != 1 {
			return fmt.Errorf("b: %d standbys, partitions %v; want 1 standby", n, b.e.Partitions())
		}
		return b.storeHas(totals(first))()
	})
	if got := b.e.Partitions(); len(got) != 0 {
		t.Errorf("b's partitions: got %v, want none (a keeps the only one)", got)
	}

	a.stop(t)
	eventually(t, "b runs the partition after a left", owns(b.e, 0))
	if got := b.e.Stats().ChangelogRestored; got != 0 {
		t.Errorf("changelog records b restored taking the partition over: got %d, want 0 (its standby was caught up)", got)
	}
	second := []rating{{1, 1}, {4, 2}}
	b.rate(t, 0, second...)
	eventually(t, "b stores every rating", b.storeHas(totals(first, second)))
}
