package engine_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
)

// TestUnitPartitionKeptAcrossRebalance: a partition that stays on its
// member through a rebalance runs on at once: no restore (no changelog
// read, no new transactional producer, nor for the rekey stage), the
// counts exact. Then a second
// member takes some partitions (restored there) while the rest stay
// (kept), and when it leaves, the partitions coming back are restored,
// since the first member did not run them in the generation between.
func TestUnitPartitionKeptAcrossRebalance(t *testing.T) {
	for _, g := range []engine.Guarantee{engine.ExactlyOnce, engine.AtLeastOnce} {
		t.Run(string(g), func(t *testing.T) {
			c := newCluster(t)
			cfg := unitConfig(c, g)
			cfg.Partitions = 3
			a := newRig(t, c, cfg, memstore.New(memstore.Local()))
			claims := &claimCounter{Table: a.store.Table, n: map[int32]int{}}
			a.store.Table = claims
			a.start(t)
			ms := [3][]int64{moviesOf(0, 3, 2), moviesOf(1, 3, 2), moviesOf(2, 3, 2)}
			var sent []rating
			rateAll := func(v float64) {
				t.Helper()
				var rs []rating
				for _, ids := range ms {
					for _, id := range ids {
						rs = append(rs, rating{id, v})
					}
				}
				a.rate(t, 0, rs...)
				sent = append(sent, rs...)
			}
			rateAll(4)
			eventually(t, "a runs every partition", owns(a.e, 0, 1, 2))
			eventually(t, "a stores the first ratings", a.storeHas(totals(sent)))

			before, claimed := a.e.Stats(), claims.snapshot()
			inits := taskInits(c, a.topics)
			a.e.Rejoin("test: a rebalance that moves nothing")
			eventually(t, "a runs every partition again, kept", func() error {
				st := a.e.Stats()
				if got := st.PartitionsResumed - before.PartitionsResumed; got != 3 || st.PartitionsRunning != 3 {
					return fmt.Errorf("partitions kept %d, running %d; want 3 and 3", got, st.PartitionsRunning)
				}
				return nil
			})
			if got := a.e.Stats().ChangelogRestored - before.ChangelogRestored; got != 0 {
				t.Errorf("changelog records restored across the rebalance: got %d, want 0", got)
			}
			if got := taskInits(c, a.topics) - inits; got != 0 {
				t.Errorf("producers initialised across the rebalance: got %d, want 0 (kept)", got)
			}
			if got := claims.snapshot(); !maps.Equal(got, claimed) {
				t.Errorf("store claims by partition across the rebalance: got %v, want %v (kept)", got, claimed)
			}
			rateAll(6)
			eventually(t, "a stores the ratings after the rebalance", a.storeHas(totals(sent)))

			// A second member: what it takes is restored there, what
			// stays on a is kept.
			cfgB := cfg
			cfgB.AdvertiseAddr = "127.0.0.1:7002"
			b := newRig(t, c, cfgB, memstore.New(memstore.Local())).start(t)
			kept := a.e.Stats().PartitionsResumed
			eventually(t, "a and b share the partitions", func() error {
				na, nb := a.e.Stats().PartitionsRunning, b.e.Stats().PartitionsRunning
				if na+nb != 3 || na == 0 || nb == 0 {
					return fmt.Errorf("a runs %d, b %d; want 3 in all, each some", na, nb)
				}
				return nil
			})
			if got, want := a.e.Stats().PartitionsResumed-kept, a.e.Stats().PartitionsRunning; got < want {
				t.Errorf("a kept %d partitions when b joined, want at least the %d it runs", got, want)
			}
			if got := b.e.Stats().PartitionsResumed; got != 0 {
				t.Errorf("b kept %d partitions, want 0: it ran none before", got)
			}
			rateAll(8)
			want := totals(sent)
			for _, r := range []*rig{a, b} {
				eventually(t, "each store has the ratings of its partitions", func() error {
					for p := range int32(3) {
						if !r.e.Owns(p) {
							continue
						}
						for _, id := range ms[p] {
							got, err := r.store.movie(t.Context(), id)
							if w := want[id]; err != nil || got.Count != w.Count || got.Sum != w.Sum {
								return fmt.Errorf("movie %d of partition %d: got count %d sum %v (%v); want count %d sum %v",
									id, p, got.Count, got.Sum, err, w.Count, w.Sum)
							}
						}
					}
					return nil
				})
			}

			// b leaves: a gets its partitions back and restores them (from
			// its standby copies), and keeps its own.
			var mine, theirs []int32
			for p := range int32(3) {
				if a.e.Owns(p) {
					mine = append(mine, p)
				} else {
					theirs = append(theirs, p)
				}
			}
			claimed = claims.snapshot()
			b.stop(t)
			eventually(t, "a runs every partition after b left", owns(a.e, 0, 1, 2))
			got := claims.snapshot()
			for _, p := range mine {
				if got[p] != claimed[p] {
					t.Errorf("partition %d, kept on a: claimed %d times when b left, want 0", p, got[p]-claimed[p])
				}
			}
			for _, p := range theirs {
				if got[p] == claimed[p] {
					t.Errorf("partition %d, back from b: not claimed again, want a restore", p)
				}
			}
			rateAll(2)
			eventually(t, "a stores every rating", a.storeHas(totals(sent)))
		})
	}
}

// claimCounter is a table that counts its claims by partition.
type claimCounter struct {
	engine.Table
	mu sync.Mutex
	n  map[int32]int
}

// Claim counts a claim of p and claims it.
func (c *claimCounter) Claim(ctx context.Context, p int32) (int64, error) {
	c.mu.Lock()
	c.n[p]++
	c.mu.Unlock()
	return c.Table.Claim(ctx, p)
}

// ScanPartition lists partition p of the wrapped table.
func (c *claimCounter) ScanPartition(ctx context.Context, p int32, fn func(engine.Doc) error) error {
	return c.Table.(engine.TableScanner).ScanPartition(ctx, p, fn)
}

// snapshot returns the claims so far, by partition.
func (c *claimCounter) snapshot() map[int32]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// taskInits counts the initialisations of the transactional producers
// of the three aggregate and the three input partitions.
func taskInits(c *kcluster, topics engine.Topics) int {
	n := 0
	for p := range int32(3) {
		n += countEvents(c, evInitProducer, topics.TransactionalID(p), false)
		n += countEvents(c, evInitProducer, topics.RekeyTransactionalID(p), false)
	}
	return n
}
