package engine

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Standby replicas: a partition assigned here as a standby (or warm-up,
// see assign.go) is tailed from its changelog into the local store under
// a claim epoch of its own, so that when it moves here its restore
// replays only what the active wrote since. A standby never writes to
// Kafka; the active's restore claims a newer epoch, fencing late writes.
//
// One goroutine (runStandbys) tails every replica in turn, at most
// standbyTurnRecords per turn, so standbys use at most one core and no
// catch-up starves the others. Restoring actives go first
// (yieldToRestores); caught-up warm-ups are handed over (warmup.go).

// standbyTurnRecords bounds the records one replica replays per turn.
const standbyTurnRecords = 50_000

// standbyRetry is how long a replica whose catch-up failed waits.
const standbyRetry = 2 * time.Second

// replica is one partition tailed here.
type replica struct {
	p      int32
	warmup atomic.Bool
	ctx    context.Context
	cancel context.CancelFunc
	// busy is held while the replica catches up; removing it cancels ctx
	// and then takes busy, so no write of it follows its removal.
	busy sync.Mutex

	claimed bool  // guarded by busy
	epoch   int64 // guarded by busy
	// checkpoint is the next changelog offset to read; end the last stable
	// offset seen; readAt when the last catch-up ended (monoNow, 0: none);
	// retryAt when a failed one may retry; warmSince when it became a warm-up.
	checkpoint, end, readAt, retryAt, warmSince atomic.Int64
}

// lag returns how many changelog offsets the replica was behind at its
// last read and how long ago that read ended; ok is false before its first.
func (r *replica) lag(now time.Duration) (records int64, age time.Duration, ok bool) {
	at := r.readAt.Load()
	if at == 0 {
		return 0, 0, false
	}
	return max(r.end.Load()-r.checkpoint.Load(), 0), now - time.Duration(at), true
}

// standbySet holds the replicas of this instance. Safe for concurrent use.
type standbySet struct {
	mu    sync.Mutex
	parts map[int32]*replica
	// promoted are the standbys whose partition became active here: while
	// its restore replays the rest of the changelog, the copy answers as
	// a standby would (see replicaStaleness), with the lag of its last read.
	promoted map[int32]*replica
	wake     chan struct{}
	// rejoinAt is when a warm-up last made the member rejoin (monoNow);
	// readySince when a warm-up first came within the acceptable lag
	// since then (0: none). See warmup.go.
	rejoinAt, readySince atomic.Int64
}

func (s *standbySet) get(p int32) *replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parts[p]
}

// restoringFrom records that partition p, active here, restores from a
// copy read up to checkpoint with the changelog at end (within the
// acceptable lag): until it runs, the copy answers as a standby would. A
// promoted standby that has read the changelog keeps its figures; one
// promoted before its first read takes the restore's, or it would answer
// nothing while the partition restores.
func (s *standbySet) restoringFrom(p int32, checkpoint, end int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.promoted == nil {
		s.promoted = map[int32]*replica{}
	}
	if r := s.promoted[p]; r != nil && r.readAt.Load() != 0 {
		return
	}
	r := &replica{p: p}
	r.markRead(checkpoint, end)
	s.promoted[p] = r
}

// markRead records that r has read the changelog up to checkpoint, with
// its end at end, now.
func (r *replica) markRead(checkpoint, end int64) {
	r.checkpoint.Store(checkpoint)
	r.end.Store(end)
	r.readAt.Store(int64(monoNow()))
}

// promotedTo returns the standby copy partition p restores from here, if
// it became active here in the current assignment.
func (s *standbySet) promotedTo(p int32) *replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.promoted[p]
}

func (s *standbySet) list() []*replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Collect(maps.Values(s.parts))
	slices.SortFunc(out, func(a, b *replica) int { return int(a.p - b.p) })
	return out
}

func (s *standbySet) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// setReplicas makes the replicas of this instance those of its new
// assignment: standbys (warm-ups among them) are tailed. Replicas no
// longer wanted stop before it returns, so a restore never runs beside
// its standby's writes; their copies are dropped later as stale unless the
// partition is active here. A standby of a partition that ran here until
// now (was) starts as read up to its checkpoint, so it answers at once.
func (e *Engine) setReplicas(was, actives, standbys, warmups []int32) {
	s := &e.standby
	want := map[int32]bool{}
	if e.localStore {
		for _, p := range standbys {
			want[p] = true
		}
	}
	for _, p := range actives {
		delete(want, p)
	}
	var stopped []*replica
	s.mu.Lock()
	if s.parts == nil {
		s.parts = map[int32]*replica{}
	}
	s.promoted = map[int32]*replica{}
	for p, r := range s.parts {
		if !want[p] {
			r.cancel()
			stopped = append(stopped, r)
			delete(s.parts, p)
			if slices.Contains(actives, p) {
				s.promoted[p] = r
			}
		}
	}
	var added []int32
	for p := range want {
		r := s.parts[p]
		if r == nil {
			ctx, cancel := context.WithCancel(context.Background())
			r = &replica{p: p, ctx: ctx, cancel: cancel}
			if cp, ok := e.copies.get(p); ok && slices.Contains(was, p) {
				r.markRead(cp, cp)
			}
			s.parts[p] = r
			added = append(added, p)
		}
		warm := slices.Contains(warmups, p)
		if warm && !r.warmup.Load() {
			r.warmSince.Store(int64(monoNow()))
		}
		r.warmup.Store(warm)
	}
	e.c.standbys.Store(int64(len(s.parts)))
	s.mu.Unlock()
	var gone []int32
	for _, r := range stopped {
		r.busy.Lock()
		//lint:ignore SA2001 an empty critical section: wait for its catch-up to end
		r.busy.Unlock()
		if !slices.Contains(actives, r.p) {
			gone = append(gone, r.p)
		}
	}
	e.cancelStaleDrops(added)
	e.scheduleStaleDrops(gone)
	s.notify()
}

// stopReplicas stops every replica (the engine stops).
func (e *Engine) stopReplicas() { e.setReplicas(nil, nil, nil, nil) }

// runStandbys tails the replicas until ctx ends.
func (e *Engine) runStandbys(ctx context.Context) {
	s := &e.standby
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		behind := false
		list := s.list()
		// A copy the store holds answers once its lag is known: read the
		// changelog's end for each new one before any replays (a member
		// back from a restart may be handed its partition any moment).
		for _, r := range list {
			if _, held := e.copies.get(r.p); held && r.readAt.Load() == 0 && ctx.Err() == nil {
				e.turn(ctx, r, true)
			}
		}
		for _, r := range list {
			if ctx.Err() != nil {
				return
			}
			if _, held := e.copies.get(r.p); r.readAt.Load() != 0 || !held {
				// Only the first read of a copy the store holds (short,
				// and it makes the copy answer) is not held back.
				e.yieldToRestores(ctx)
			}
			if e.turn(ctx, r, false) {
				behind = true
			}
			e.handOverWarmups(ctx)
		}
		if behind {
			continue
		}
		poll.Reset(e.cfg.CommitInterval)
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-poll.C:
		}
	}
}

// turn runs one turn of replica r, without its replay when probe is set,
// and reports whether it is still behind.
func (e *Engine) turn(ctx context.Context, r *replica, probe bool) (behind bool) {
	r.busy.Lock()
	defer r.busy.Unlock()
	if r.ctx.Err() != nil || monoNow() < time.Duration(r.retryAt.Load()) {
		return false
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(r.ctx, cancel)
	defer stop()
	behind, err := e.tail(ctx, r, probe)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrFenced) {
			e.log.Warn("standby could not catch up; it tries again", "partition", r.p, "err", err, "retry_in", standbyRetry)
		}
		r.claimed = false
		r.retryAt.Store(int64(monoNow() + standbyRetry))
		return false
	}
	return behind
}

// tail claims r's partition in the store on its first turn, reads the
// changelog's last stable offset (from then on the copy answers, its lag
// declared, see replicaStaleness) and, unless probe is set, replays the
// changelog from r's checkpoint towards it.
func (e *Engine) tail(ctx context.Context, r *replica, probe bool) (behind bool, err error) {
	if !r.claimed {
		if r.epoch, err = e.table.Claim(ctx, r.p); err != nil {
			return false, err
		}
		cp, ok, err := e.table.Checkpoint(ctx, r.p)
		if err != nil {
			return false, err
		}
		start, err := e.clog.Start(ctx, e.topics.Changelog, r.p)
		if err != nil {
			return false, err
		}
		if !ok || cp < start {
			cp = start
		}
		r.checkpoint.Store(cp)
		r.claimed = true
	}
	end, err := e.clog.LastStable(ctx, e.topics.Changelog, r.p)
	if err != nil {
		return false, err
	}
	cp := r.checkpoint.Load()
	if cp > end {
		// The changelog ends before this copy (deleted or truncated):
		// the copy belongs to another history; start over.
		e.log.Warn("standby copy is ahead of the changelog; dropping it and replaying", "partition", r.p, "checkpoint", cp, "changelog_end", end)
		if err := e.table.DropPartition(ctx, r.p); err != nil {
			return false, err
		}
		e.copies.drop(r.p)
		r.claimed = false
		return true, nil
	}
	if cp < end {
		r.end.Store(end)
		r.readAt.Store(int64(monoNow()))
		if probe {
			return true, nil
		}
		if _, cp, err = e.replay(ctx, r.p, r.epoch, cp, end, standbyTurnRecords, catchUpBatchDocs, &e.c.standbyRead); err != nil {
			return false, err
		}
	}
	if _, ok := e.copies.get(r.p); !ok && cp == end {
		// An empty changelog leaves no checkpoint in the store, yet the
		// copy is exact: report it, or the leader never counts this
		// warm-up caught up and its member rejoins for it again and again.
		e.copies.set(r.p, cp)
	}
	r.markRead(cp, end)
	return cp < end, nil
}

// copies tracks the changelog checkpoint of every partition the store
// holds, as tasks and standbys write them, for the assignor. Safe for
// concurrent use.
type copies struct {
	mu sync.Mutex
	m  map[int32]int64
}

func (c *copies) set(p int32, cp int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[int32]int64{}
	}
	c.m[p] = cp
}

func (c *copies) get(p int32) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.m[p]
	return cp, ok
}

func (c *copies) drop(p int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, p)
}

func (c *copies) snapshot() map[int32]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

// loadCopies reads the checkpoint of every partition from the store.
func (e *Engine) loadCopies(ctx context.Context) error {
	for p := range e.nParts {
		cp, ok, err := e.table.Checkpoint(ctx, p)
		if err != nil {
			return err
		}
		if ok {
			e.copies.set(p, cp)
		}
	}
	return nil
}

// memberState is what this member reports to the assignor.
func (e *Engine) memberState() memberState {
	actives, inputs := e.lastSession()
	s := memberState{Addr: e.cfg.AdvertiseAddr, Shared: !e.localStore, Actives: actives, Inputs: inputs}
	if e.localStore {
		s.Copies = e.copies.snapshot()
		for _, r := range e.standby.list() {
			s.Standbys = append(s.Standbys, r.p)
		}
	}
	return s
}
