package engine

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// PartitionState is the lifecycle state of an aggregate partition on this instance.
type PartitionState int

// Partition states: a newly assigned partition restores from the changelog
// (RESTORING) and then processes (RUNNING).
const (
	Restoring PartitionState = iota
	Running
)

// String returns RESTORING or RUNNING.
func (s PartitionState) String() string {
	if s == Running {
		return "RUNNING"
	}
	return "RESTORING"
}

// partitionTracker records the assigned partitions and their states, and
// the partitions in hand-over (see handover.go).
type partitionTracker struct {
	mu       sync.Mutex
	joined   bool
	states   map[int32]PartitionState
	storeErr error
	// warm holds partitions revoked while RUNNING here, until when they may
	// still be answered: nobody else has been assigned them yet.
	warm  map[int32]time.Time
	grace time.Duration
	// warmGen is the generation of the session whose partitions are warm.
	warmGen int32
}

// locked runs f holding t.mu.
func (t *partitionTracker) locked(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f()
}

// revoked records the generation of the session that is giving up its
// partitions (Cleanup), for the next assignment to check (onAssigned).
func (t *partitionTracker) revoked(gen int32) { t.locked(func() { t.warmGen = gen }) }

// unwarm ends the hand-over of p at once: its copy here may be behind.
func (t *partitionTracker) unwarm(p int32) { t.locked(func() { delete(t.warm, p) }) }

func (t *partitionTracker) set(p int32, s PartitionState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.states == nil {
		t.states = map[int32]PartitionState{}
	}
	t.states[p] = s
	if s == Running {
		delete(t.warm, p) // RUNNING again: its hand-over ends
	}
}

// remove forgets p; a partition that was RUNNING stays answerable (warm)
// until the next assignment or for the grace period.
func (t *partitionTracker) remove(p int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.states[p] == Running && t.grace > 0 {
		if t.warm == nil {
			t.warm = map[int32]time.Time{}
		}
		t.warm[p] = time.Now().Add(t.grace)
	}
	delete(t.states, p)
}

func (t *partitionTracker) setJoined() { t.locked(func() { t.joined = true }) }

func (t *partitionTracker) setStoreErr(err error) { t.locked(func() { t.storeErr = err }) }

// Partitions returns the state of each repartition partition this instance owns.
func (r *Router) Partitions() map[int32]PartitionState {
	r.parts.mu.Lock()
	defer r.parts.mu.Unlock()
	return maps.Clone(r.parts.states)
}

// Owns reports whether this instance currently owns aggregate partition p
// (RESTORING or RUNNING).
func (r *Router) Owns(p int32) bool {
	_, ok := r.partitionState(p)
	return ok
}

// partitionState returns the state of partition p here; ok is false when
// this instance does not own p.
func (r *Router) partitionState(p int32) (s PartitionState, ok bool) {
	r.parts.mu.Lock()
	defer r.parts.mu.Unlock()
	s, ok = r.parts.states[p]
	return s, ok
}

// answerable reports whether queries for partition p may be answered from
// this instance's store: p is RUNNING here, or in hand-over (see
// handover.go), and the read lease runs (see lease.go).
func (r *Router) answerable(p int32) bool {
	if !r.leaseValid() {
		return false
	}
	r.parts.mu.Lock()
	defer r.parts.mu.Unlock()
	return r.parts.answerableLocked(p, time.Now())
}

func (t *partitionTracker) answerableLocked(p int32, now time.Time) bool {
	if s, ok := t.states[p]; ok && s == Running {
		return true
	}
	until, ok := t.warm[p]
	return ok && now.Before(until)
}

// answerableSet returns the partitions answerable on this instance: none
// while the read lease has lapsed.
func (r *Router) answerableSet() map[int32]bool {
	if !r.leaseValid() {
		return map[int32]bool{}
	}
	r.parts.mu.Lock()
	defer r.parts.mu.Unlock()
	now := time.Now()
	out := make(map[int32]bool, len(r.parts.states)+len(r.parts.warm))
	for p := range r.parts.states {
		if r.parts.answerableLocked(p, now) {
			out[p] = true
		}
	}
	for p := range r.parts.warm {
		if r.parts.answerableLocked(p, now) {
			out[p] = true
		}
	}
	return out
}

// Ready returns nil when the instance has joined its group, its read lease
// runs, every assigned partition is RUNNING and the store is reachable;
// otherwise an error saying why.
func (r *Router) Ready() error {
	r.parts.mu.Lock()
	defer r.parts.mu.Unlock()
	if !r.parts.joined {
		return fmt.Errorf("not yet joined consumer group %q", r.appID)
	}
	if err := r.restarts.failing(); err != nil {
		return err
	}
	if err := r.writes.stuck(r.restarts.lastCause()); err != nil {
		return err
	}
	if len(r.parts.states) > 0 && !r.leaseValid() {
		return fmt.Errorf("group membership unconfirmed: no heartbeat answered within the session timeout (read lease lapsed)")
	}
	if r.parts.storeErr != nil {
		return fmt.Errorf("store unavailable: %v", r.parts.storeErr)
	}
	var restoring []int32
	for p, s := range r.parts.states {
		if s != Running {
			restoring = append(restoring, p)
		}
	}
	if len(restoring) > 0 {
		slices.Sort(restoring)
		return fmt.Errorf("partitions %v restoring", restoring)
	}
	return nil
}
