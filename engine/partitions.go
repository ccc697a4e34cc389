package engine

import (
	"fmt"
	"sort"
	"sync"
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

// partitionTracker records the assigned partitions and their states.
type partitionTracker struct {
	mu       sync.Mutex
	joined   bool
	states   map[int32]PartitionState
	storeErr error
}

func (t *partitionTracker) set(p int32, s PartitionState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.states == nil {
		t.states = map[int32]PartitionState{}
	}
	t.states[p] = s
}

func (t *partitionTracker) remove(p int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.states, p)
}

func (t *partitionTracker) setJoined() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.joined = true
}

func (t *partitionTracker) setStoreErr(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.storeErr = err
}

// Partitions returns the state of each repartition partition this instance owns.
func (e *Engine) Partitions() map[int32]PartitionState {
	e.parts.mu.Lock()
	defer e.parts.mu.Unlock()
	out := make(map[int32]PartitionState, len(e.parts.states))
	for p, s := range e.parts.states {
		out[p] = s
	}
	return out
}

// Owns reports whether this instance currently owns aggregate partition p
// (RESTORING or RUNNING).
func (e *Engine) Owns(p int32) bool {
	_, ok := e.partitionState(p)
	return ok
}

// partitionState returns the state of partition p here; ok is false when
// this instance does not own p.
func (e *Engine) partitionState(p int32) (s PartitionState, ok bool) {
	e.parts.mu.Lock()
	defer e.parts.mu.Unlock()
	s, ok = e.parts.states[p]
	return s, ok
}

// runningSet returns the partitions RUNNING on this instance.
func (e *Engine) runningSet() map[int32]bool {
	e.parts.mu.Lock()
	defer e.parts.mu.Unlock()
	out := make(map[int32]bool, len(e.parts.states))
	for p, s := range e.parts.states {
		if s == Running {
			out[p] = true
		}
	}
	return out
}

// Ready returns nil when the instance has joined its group, every assigned
// partition is RUNNING and the store is reachable; otherwise an error saying why.
func (e *Engine) Ready() error {
	e.parts.mu.Lock()
	defer e.parts.mu.Unlock()
	if !e.parts.joined {
		return fmt.Errorf("not yet joined consumer group %q", e.cfg.ApplicationID)
	}
	if e.parts.storeErr != nil {
		return fmt.Errorf("store unavailable: %v", e.parts.storeErr)
	}
	var restoring []int32
	for p, s := range e.parts.states {
		if s != Running {
			restoring = append(restoring, p)
		}
	}
	if len(restoring) > 0 {
		sort.Slice(restoring, func(i, j int) bool { return restoring[i] < restoring[j] })
		return fmt.Errorf("partitions %v restoring", restoring)
	}
	return nil
}
