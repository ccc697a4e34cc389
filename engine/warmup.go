package engine

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Hand-over of warm-ups (assign.go): once a warm-up is within the
// acceptable lag, its member rejoins so that the leader moves the active
// here. Every rejoin stops the whole group for a moment, so a member hands
// its warm-ups over together, waiting for those behind no longer than a
// quarter of the time the first took (gatherWait). It first tops them up
// and ends the store's bulk load (TableSettler), which a new active's
// claim would otherwise wait for, and never rejoins while actives restore.

// minRejoinGap bounds how often caught-up warm-ups make this member
// rejoin the group.
const minRejoinGap = 2 * time.Second

// gatherMin and gatherMax bound how long a caught-up warm-up waits for
// the member's others.
const (
	gatherMin = time.Second
	gatherMax = 15 * time.Second
)

// restoreYield bounds how long the standbys wait for the instance's
// restoring actives before their next turn.
const restoreYield = 2 * time.Second

// gatherWait is how long warm-ups that caught up after warming for took
// wait for the member's other warm-ups.
func gatherWait(took time.Duration) time.Duration {
	return min(max(took/4, gatherMin), gatherMax)
}

// handOver decides, at now, whether this member's warm-ups are ready to be
// handed over: ready are the ones within the acceptable lag, and rejoin is
// set when the member should rejoin for them now. It records the decision
// (rejoin time, gathering start, ready warm-ups stop being warm-ups), so
// only the standby loop calls it.
func (e *Engine) handOver(now time.Duration) (ready []*replica, rejoin bool) {
	if e.restoring() {
		// Rejoining now would stop the member's restores half-way and
		// stall their partitions through a second rebalance.
		return nil, false
	}
	s := &e.standby
	since, behind := now, 0
	for _, r := range s.list() {
		if !r.warmup.Load() {
			continue
		}
		if n, _, ok := r.lag(now); ok && n <= e.cfg.AcceptableLag {
			ready = append(ready, r)
			since = min(since, time.Duration(r.warmSince.Load()))
		} else {
			behind++
		}
	}
	if len(ready) == 0 {
		s.readySince.Store(0)
		return nil, false
	}
	first := time.Duration(s.readySince.Load())
	if first == 0 {
		first = now
		s.readySince.Store(int64(now))
	}
	if behind > 0 && now-first < gatherWait(first-since) {
		return ready, false
	}
	if last := s.rejoinAt.Load(); last != 0 && now-time.Duration(last) < minRejoinGap {
		return ready, false
	}
	for _, r := range ready {
		r.warmup.Store(false)
	}
	s.readySince.Store(0)
	s.rejoinAt.Store(int64(now))
	return ready, true
}

// handOverWarmups makes the member rejoin the group when handOver says
// so, once the store's bulk load is settled.
func (e *Engine) handOverWarmups(ctx context.Context) {
	ready, rejoin := e.handOver(monoNow())
	if !rejoin {
		return
	}
	// Top the ready warm-ups up while their bulk load is still on, so the
	// new active's delta replay is short.
	ps := make([]int32, 0, len(ready))
	for _, r := range ready {
		e.turn(ctx, r, false)
		ps = append(ps, r.p)
	}
	slices.Sort(ps)
	// Settled before the rebalance: writing the buffer out takes seconds at
	// millions of documents, and the new actives' claims would wait for it
	// with their partitions stopped; before it, the old actives go on.
	if st, ok := e.table.(TableSettler); ok {
		began := time.Now()
		if err := st.Settle(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("could not write out the warm-ups' bulk load before the hand-over; the first flush will", "err", err)
		} else {
			e.log.Debug("warm-ups' bulk load written out before the hand-over", "partitions", ps, "took", time.Since(began))
		}
	}
	e.rejoin(fmt.Sprint("warm-ups caught up: partitions ", ps))
}

// yieldToRestores waits, for at most restoreYield, while a task of this
// instance restores: its delta replay is what stands between a moved
// partition and its processing, and the standbys' catch-up must not slow
// it down.
func (e *Engine) yieldToRestores(ctx context.Context) {
	if !e.restoring() {
		return
	}
	deadline := time.After(restoreYield)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for e.restoring() {
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}

// restoring reports whether a task of this instance is restoring (its
// session's partitions are not all running yet).
func (e *Engine) restoring() bool { return e.c.assigned.Load() > e.c.running.Load() }
