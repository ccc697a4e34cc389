package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
)

// heldReplays is a table whose replay batches (DocBatch.Replay) wait
// until release is called or their context ends, so that a test can hold
// an instance's restores and standby catch-ups half-way. Other batches
// go through at once.
type heldReplays struct {
	engine.Table
	released chan struct{}
	once     sync.Once

	mu      sync.Mutex
	waiting map[int32]int // replay batches held now, by partition
}

// newHeldReplays wraps t.
func newHeldReplays(t engine.Table) *heldReplays {
	return &heldReplays{Table: t, released: make(chan struct{}), waiting: map[int32]int{}}
}

// Apply writes b, a replay batch once released.
func (h *heldReplays) Apply(ctx context.Context, b engine.DocBatch) error {
	if b.Replay {
		h.mu.Lock()
		h.waiting[b.Partition]++
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.waiting[b.Partition]--
			h.mu.Unlock()
		}()
		select {
		case <-h.released:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.Table.Apply(ctx, b)
}

// ScanPartition lists partition p of the wrapped table.
func (h *heldReplays) ScanPartition(ctx context.Context, p int32, fn func(engine.Doc) error) error {
	return h.Table.(engine.TableScanner).ScanPartition(ctx, p, fn)
}

// held returns how many replay batches of partition p wait now.
func (h *heldReplays) held(p int32) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting[p]
}

// release lets every held replay batch, and all later ones, through.
func (h *heldReplays) release() { h.once.Do(func() { close(h.released) }) }

// TestUnitStandbyAnswersBeforeItsReplay: a member back from a restart
// holds copies, within the acceptable lag, of partitions x and y (a bit
// behind their active) and none of w. The leader gives it x as active
// and w and y as standbys. With every replay of the member held (x's
// restore, so the member is restoring, and the standbys' catch-ups):
//
//   - y's standby answers at once, its lag declared, with its copy's
//     stale value: its first turn is a probe that reads the changelog's end
//     before any replay and without waiting for the member's restores;
//   - w's standby (no copy, so no probe) answers too once its first turn
//     started its replay, its lag declared: the end is stored before it;
//   - neither ever answers as the active.
//
// Once the replays go on, y's standby catches up and answers the exact
// value with no lag.
func TestUnitStandbyAnswersBeforeItsReplay(t *testing.T) {
	const w, x, y = 0, 1, 2 // w < y: w's turn comes before y's in a round
	c := newCluster(t)
	cfg := unitConfig(c, engine.AtLeastOnce)
	cfg.Partitions = 3
	ctx := context.Background()
	a := newRig(t, c, cfg, memstore.New(memstore.Local())).start(t)
	mw, mx, my := moviesOf(w, 3, 1)[0], moviesOf(x, 3, 1)[0], moviesOf(y, 3, 3)
	first := []rating{{mw, 3}, {mx, 5}, {my[0], 7}}
	a.rate(t, 0, first...)
	eventually(t, "first instance stores the first ratings", a.storeHas(totals(first)))
	eventually(t, "first instance runs every partition", owns(a.e, w, x, y))

	// The second member's copies of x and y, as the first instance's store
	// holds them now.
	storeB := memstore.New(memstore.Local())
	copied := map[int32]int64{}
	for p, id := range map[int32]int64{x: mx, y: my[0]} {
		m, err := a.store.movie(ctx, id)
		if err != nil {
			t.Fatalf("movie %d of partition %d in the first store: %v", id, p, err)
		}
		cp, ok, err := a.store.Checkpoint(ctx, p)
		if err != nil || !ok {
			t.Fatalf("checkpoint of partition %d in the first store: got %d, %v, %v; want one", p, cp, ok, err)
		}
		seed(t, storeB, p, cp, m)
		copied[p] = cp
	}
	// y's copy falls further behind than x's: the leader moves x to the
	// second member, the partition it is the most caught up on.
	second := []rating{{mx, 1}, {my[0], 9}, {my[1], 2}, {my[2], 4}}
	a.rate(t, 0, second...)
	all := totals(first, second)
	eventually(t, "first instance stores the second ratings", a.storeHas(all))
	lag := map[int32]int64{}
	for _, p := range []int32{x, y} {
		cp, _, err := a.store.Checkpoint(ctx, p)
		if err != nil {
			t.Fatalf("checkpoint of partition %d in the first store: %v", p, err)
		}
		lag[p] = cp - copied[p]
	}
	if lag[x] <= 0 || lag[y] <= lag[x] || lag[y] > cfg.AcceptableLag {
		t.Fatalf("copies behind by %d (x) and %d (y) records; want 0 < x < y <= %d", lag[x], lag[y], cfg.AcceptableLag)
	}

	cfgB := cfg
	cfgB.AdvertiseAddr = "127.0.0.1:7002"
	b := newRig(t, c, cfgB, storeB)
	hold := newHeldReplays(b.store.Table)
	b.store.Table = hold
	b.start(t)
	t.Cleanup(hold.release) // before the rig's stop
	eventually(t, "second instance given x as active, w and y as standbys", func() error {
		if n, ps := b.e.Stats().PartitionsStandby, b.e.Partitions(); n != 2 || len(ps) != 1 || ps[x] != engine.Restoring {
			return fmt.Errorf("second instance: %d standbys, partitions %v; want 2 standbys, partition %d RESTORING", n, ps, x)
		}
		return nil
	})
	assigned := time.Now()
	view := b.e.View()
	key := func(id int64) []byte { return engine.Int64Keys.Append(nil, id) }
	var (
		got movieStats
		st  engine.Staleness
	)
	eventually(t, "standby of y answers while every replay is held", func() error {
		d, s, err := view.GetReplica(ctx, key(my[0]))
		if err != nil {
			return fmt.Errorf("GetReplica of movie %d: %w", my[0], err)
		}
		m, err := statsOf(d)
		if err != nil {
			return err
		}
		got, st = m, s
		return nil
	})
	// Waiting for the restores would take RestoreYield (x's restore is
	// held), skipping the probe w's turn (its replay is held): the bound
	// leaves half of RestoreYield for polling and a loaded machine.
	took := time.Since(assigned)
	t.Logf("standby of y first answered %v after the assignment was seen", took)
	if bound := engine.RestoreYield / 2; took >= bound {
		t.Errorf("standby of y first answered %v after the assignment, want < %v: its first read waited for the restores", took, bound)
	}
	if want := totals(first)[my[0]]; got.Count != want.Count || got.Sum != want.Sum {
		t.Errorf("standby of y answered count %d sum %v, want its copy's count %d sum %v", got.Count, got.Sum, want.Count, want.Sum)
	}
	if st.Records != lag[y] || st.Unconfirmed {
		t.Errorf("standby of y: got staleness %+v, want %d records behind, not unconfirmed", st, lag[y])
	}
	if ps := b.e.Partitions(); ps[x] != engine.Restoring {
		t.Errorf("second instance when y answered: partitions %v, want %d RESTORING", ps, x)
	}

	eventually(t, "standby of w answers while its replay is held", func() error {
		if nw, nx := hold.held(w), hold.held(x); nw != 1 || nx != 1 {
			return fmt.Errorf("replay batches held: got %d of w, %d of x; want 1 of each", nw, nx)
		}
		s, ok := view.ReplicaStaleness(w)
		if !ok || s.Records <= 0 || s.Unconfirmed {
			return fmt.Errorf("staleness of w: got %+v, %v; want records behind, ok", s, ok)
		}
		return nil
	})
	if _, s, err := view.GetReplica(ctx, key(my[0])); err != nil || s.Records != lag[y] {
		t.Errorf("standby of y with w's replay held: got staleness %+v, %v; want %d records behind", s, err, lag[y])
	}
	for _, id := range []int64{mw, my[0]} {
		if _, err := view.Get(ctx, key(id)); !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("View.Get of movie %d, a standby here: got %v, want ErrUnavailable", id, err)
		}
	}

	hold.release()
	eventually(t, "standby of y caught up", func() error {
		for _, id := range my {
			d, s, err := view.GetReplica(ctx, key(id))
			if err != nil {
				return fmt.Errorf("GetReplica of movie %d: %w", id, err)
			}
			got, err := statsOf(d)
			if err != nil {
				return err
			}
			if want := all[id]; s.Records != 0 || got.Count != want.Count || got.Sum != want.Sum {
				return fmt.Errorf("movie %d: got count %d sum %v, %d records behind; want count %d sum %v, none behind",
					id, got.Count, got.Sum, s.Records, want.Count, want.Sum)
			}
		}
		return nil
	})
	eventually(t, "second instance runs x", owns(b.e, x))
}
