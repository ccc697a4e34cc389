package engine

import "time"

// Hand-over: with the eager rebalance protocol every member gives up all
// its partitions (Cleanup) before the group assigns them again (Setup),
// and a partition assigned back restores before it runs. Between the two,
// nobody processes the partition, and this instance's store holds its
// last flushed state, which is exactly what it answered a moment before.
// Answering 503 there would make every rebalance (a peer crash, a scale-up)
// fail the lookups of partitions that never moved.
//
// So a partition that was RUNNING when it was revoked stays answerable
// ("warm") until the next assignment: if that gives it back, it stays
// answerable through its (short: nothing to replay) restore until RUNNING;
// if it goes to another instance, it stops being answerable at once, before
// the new owner can have flushed anything. A warm partition also expires
// after handoverGrace, should no assignment come (Kafka unreachable).
//
// A partition that was not RUNNING (restoring after a lost store, or from
// another owner) is never warm: during such a restore the store is behind,
// and its keys answer 503 with Retry-After.

// minHandoverGrace is the least time a revoked partition stays warm.
const minHandoverGrace = 5 * time.Second

// onAssigned is called by Setup with the new assignment (already marked
// RESTORING) of generation gen: partitions assigned elsewhere stop being
// warm, pending drops of the assigned ones are cancelled.
//
// Every warm partition also stops being warm unless gen directly follows
// the generation that revoked them. A member paused past the session
// timeout revokes its partitions only when it wakes, after the group went
// on without it: another member ran them in the generations in between,
// and this copy is behind. Answering from it while it restores would be a
// stale read (seen in the chaos test: a count two ratings short).
func (e *Engine) onAssigned(ps []int32, gen int32) {
	e.route.assigned(ps, gen, max(2*e.cfg.SessionTimeout, minHandoverGrace))
	e.cancelStaleDrops(ps)
}

// assigned ends the hand-over of the warm partitions that ps (generation
// gen) does not give back, or all of them when gen does not directly
// follow the revoking generation (see onAssigned); grace is how long the
// partitions revoked next stay warm.
func (r *Router) assigned(ps []int32, gen int32, grace time.Duration) {
	mine := make(map[int32]bool, len(ps))
	for _, p := range ps {
		mine[p] = true
	}
	r.parts.mu.Lock()
	defer r.parts.mu.Unlock()
	r.parts.grace = grace
	for p := range r.parts.warm {
		if !mine[p] || gen != r.parts.warmGen+1 {
			delete(r.parts.warm, p)
		}
	}
}
