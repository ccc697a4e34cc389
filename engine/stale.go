package engine

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// InstanceLocal is an optional ability of a store: saying whether its state
// belongs to this instance alone (an embedded store on its own volume) or
// is shared by all instances (Redis). Only an instance-local store has
// stale copies of partitions that moved away; a shared store's documents
// are the new owner's and are never dropped.
type InstanceLocal interface {
	// InstanceLocal reports whether the store's state is this instance's
	// alone.
	InstanceLocal() bool
}

// staleDropTimeout bounds one DropPartition of a stale copy.
const staleDropTimeout = time.Minute

// staleDropper deletes the copy of a partition from an instance-local
// store Config.StaleDropAfter after the partition was revoked, unless it
// was assigned back meanwhile; until then the copy is a warm start should
// the partition come back. Safe for concurrent use.
type staleDropper struct {
	mu      sync.Mutex
	pending map[int32]*staleDrop
	// running is held while a drop deletes; assignment takes it so that
	// a partition is never restored while its old copy is being deleted.
	running sync.Mutex
	dropped atomic.Int64 // stale copies deleted so far
	stopped bool         // guarded by mu: the engine stopped, arm nothing
}

// staleDrop is one armed drop. Its timer's function identifies it by this
// pointer, which exists before the timer does: a timer firing before
// AfterFunc returns must not read the variable its result is stored to.
type staleDrop struct{ timer *time.Timer }

// stop disarms every pending drop and waits for a running one, so that no
// drop touches the store after the engine's Run returned (the caller then
// closes the store).
func (d *staleDropper) stop() { d.disarm(true, nil) }

// disarm disarms the drops of ps (all and stops arming more, if all) and
// waits for a drop in progress.
func (d *staleDropper) disarm(all bool, ps []int32) {
	d.mu.Lock()
	if all {
		d.stopped = true
		ps = slices.Collect(maps.Keys(d.pending))
	}
	for _, p := range ps {
		if sd := d.pending[p]; sd != nil {
			sd.timer.Stop()
			delete(d.pending, p)
		}
	}
	d.mu.Unlock()
	d.running.Lock()
	//lint:ignore SA2001 an empty critical section: wait for a running drop
	d.running.Unlock()
}

// staleDropsEnabled reports whether this engine drops stale copies.
func (e *Engine) staleDropsEnabled() bool { return e.localStore && e.cfg.StaleDropAfter > 0 }

// scheduleStaleDrops arms a drop of each revoked partition.
func (e *Engine) scheduleStaleDrops(ps []int32) {
	if !e.staleDropsEnabled() {
		return
	}
	d := &e.stale
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	if d.pending == nil {
		d.pending = map[int32]*staleDrop{}
	}
	for _, p := range ps {
		if old := d.pending[p]; old != nil {
			old.timer.Stop()
		}
		sd := &staleDrop{}
		sd.timer = time.AfterFunc(e.cfg.StaleDropAfter, func() { e.dropStale(p, sd) })
		d.pending[p] = sd
	}
}

// cancelStaleDrops disarms the drops of newly assigned partitions and waits
// for a drop in progress. The caller has already marked ps as owned, so a
// drop that starts after this returns skips them.
func (e *Engine) cancelStaleDrops(ps []int32) { e.stale.disarm(false, ps) }

// dropStale deletes the stale copy of p if sd is still its pending drop
// and this instance has not been assigned p again.
func (e *Engine) dropStale(p int32, sd *staleDrop) {
	d := &e.stale
	d.running.Lock()
	defer d.running.Unlock()
	d.mu.Lock()
	current := d.pending[p] == sd
	if current {
		delete(d.pending, p)
	}
	d.mu.Unlock()
	if !current || e.Owns(p) || e.standby.get(p) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), staleDropTimeout)
	defer cancel()
	if err := e.table.DropPartition(ctx, p); err != nil {
		e.log.Warn("could not drop the stale copy of a partition that moved away; it stays until the next try", "partition", p, "err", err)
		return
	}
	d.dropped.Add(1)
	e.copies.drop(p)
	e.log.Info("dropped the stale copy of a partition that moved away", "partition", p, "after", e.cfg.StaleDropAfter)
}
