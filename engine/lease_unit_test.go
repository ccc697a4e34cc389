package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
)

// TestUnitReadLeaseLapsesWithoutHeartbeats cuts an instance's heartbeats
// off (the cluster answers every heartbeat COORDINATOR_NOT_AVAILABLE,
// which the consumer group's own heartbeat loop rides out; its group
// session itself goes on: the cluster keeps members far longer than the
// session timeout they ask for, so it does not expire it): within the
// session timeout its read lease lapses, and it must answer none of its
// partitions as owner, by key, by range or as ready, with ErrLeaseLapsed;
// once heartbeats are answered again, it answers again.
func TestUnitReadLeaseLapsesWithoutHeartbeats(t *testing.T) {
	c := newCluster(t) // keeps members far longer than their session timeout
	cfg := unitConfig(c, engine.ExactlyOnce)
	store := memstore.New(memstore.Local())
	r := newRig(t, c, cfg, store).start(t)
	movie := moviesOf(0, 1, 1)[0]
	r.rate(t, 0, rating{movie, 7})
	eventually(t, "movie stored", r.storeHas(totals([]rating{{movie, 7}})))
	eventually(t, "partition 0 running", owns(r.e, 0))
	ctx := context.Background()
	if _, local, err := r.e.Owner(ctx, engine.Int64Keys.Append(nil, movie)); err != nil || !local {
		t.Fatalf("Owner with the lease running: local %v, %v; want local", local, err)
	}

	cut := c.fail(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Err: kerr.CoordinatorNotAvailable, Count: -1})
	q := r.e.View()
	eventually(t, "lease lapsed", func() error {
		_, local, err := r.e.Owner(ctx, engine.Int64Keys.Append(nil, movie))
		if !errors.Is(err, engine.ErrLeaseLapsed) {
			return fmt.Errorf("Owner: local %v, %v; want ErrLeaseLapsed", local, err)
		}
		return nil
	})
	if err := r.e.Ready(); err == nil {
		t.Error("Ready with a lapsed lease: nil, want an error")
	}
	if m, err := viewMovie(ctx, q, movie); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("Get with a lapsed lease: %+v, %v; want ErrUnavailable", m, err)
	}
	if page, covered, err := q.QueryLocal(ctx, avgQuery(10)); err != nil || len(covered) != 0 || len(page.Docs) != 0 {
		t.Errorf("QueryLocal with a lapsed lease: %d movies, covered %v, %v; want none", len(page.Docs), covered, err)
	}
	if got := r.e.Partitions()[0]; got != engine.Running {
		t.Errorf("partition 0 is %v; the test wants the session still running (only the lease lapsed)", got)
	}

	if n := r.e.Stats().ReadLeaseLapses; n != 0 {
		t.Errorf("ReadLeaseLapses while lapsed: %d, want 0 (counted when a renewal finds it ran out)", n)
	}
	cut.Remove()
	eventually(t, "lease renewed", func() error {
		if _, local, err := r.e.Owner(ctx, engine.Int64Keys.Append(nil, movie)); err != nil || !local {
			return fmt.Errorf("Owner: local %v, %v; want local", local, err)
		}
		return r.e.Ready()
	})
	if n := r.e.Stats().ReadLeaseLapses; n != 1 {
		t.Errorf("ReadLeaseLapses after one lapse: %d, want 1", n)
	}
	if m, err := viewMovie(ctx, q, movie); err != nil || m.Count != 1 {
		t.Errorf("Get after the lease was renewed: %+v, %v; want count 1", m, err)
	}

	// A coordinator that moved: the keeper looks it up again and goes on.
	// The refusals go to the next heartbeats of both the keeper and the
	// consumer group, which send at the same pace. Once they are over, the
	// lease must still be renewed more than a lease span later: a keeper
	// that stopped at a refusal would have let it run out by then.
	const refused = 6
	c.fail(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Err: kerr.NotCoordinator, Count: refused})
	eventually(t, "heartbeats refused by a moved coordinator", func() error {
		if n := countFailed(c, evHeartbeat, kerr.NotCoordinator); n < refused {
			return fmt.Errorf("%d heartbeats refused by a moved coordinator, want %d", n, refused)
		}
		return nil
	})
	after := time.Now()
	eventually(t, "heartbeats past a moved coordinator", func() error {
		if _, _, err := r.e.Owner(ctx, engine.Int64Keys.Append(nil, movie)); err != nil {
			return err
		}
		if d := time.Since(after); d <= cfg.SessionTimeout {
			return fmt.Errorf("only %v since the refusals, want the lease renewed past %v", d, cfg.SessionTimeout)
		}
		return nil
	})
}

// countFailed counts the events of kind that failed with target.
func countFailed(c *kcluster, kind string, target error) int {
	n := 0
	for _, ev := range c.Events() {
		if ev.Kind == kind && errors.Is(ev.Err, target) {
			n++
		}
	}
	return n
}
