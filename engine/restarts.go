package engine

import (
	"fmt"
	"sync"
	"time"
)

// restartWindow and restartLimit define a failing group: this many
// session restarts within the window make /readyz fail, so that a loop
// (a poison record, a broker refusing every transaction) is visible
// instead of hidden behind a 200.
const (
	restartWindow = time.Minute
	restartLimit  = 3
)

// restartLog remembers recent group session restarts and why.
type restartLog struct {
	mu   sync.Mutex
	at   []time.Time
	last error
	now  func() time.Time // time.Now when nil
}

func (r *restartLog) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// note records a restart caused by err.
func (r *restartLog) note(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	r.at = append(r.recentLocked(now), now)
	r.last = err
}

func (r *restartLog) recentLocked(now time.Time) []time.Time {
	i := 0
	for i < len(r.at) && now.Sub(r.at[i]) > restartWindow {
		i++
	}
	return r.at[i:]
}

// lastCause returns the error of the last restart if it happened within
// restartWindow (nil: none).
func (r *restartLog) lastCause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recentLocked(r.clock())) == 0 {
		return nil
	}
	return r.last
}

// failing returns an error when the group restarted restartLimit times or
// more within restartWindow, else nil.
func (r *restartLog) failing() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.recentLocked(r.clock()))
	if n < restartLimit {
		return nil
	}
	return fmt.Errorf("group session restarted %d times in the last %s; last cause: %v", n, restartWindow, r.last)
}
