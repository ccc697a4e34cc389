package engine

import "time"

// Hand-over: with the eager rebalance protocol every member gives up all
// its partitions (Cleanup) before the group assigns them again (Setup).
// Between the two nobody processes the partition and this store holds
// exactly what it answered a moment before, so a partition RUNNING when
// revoked stays answerable ("warm") until the next assignment: given back,
// through its short restore; given elsewhere, it stops at once, before the
// new owner can have flushed anything. It also expires after the grace
// period (Kafka unreachable). A partition not RUNNING is never warm.

// minHandoverGrace is the least time a revoked partition stays warm.
const minHandoverGrace = 5 * time.Second

// onAssigned is called by Setup with the new assignment (already marked
// RESTORING) of generation gen: partitions assigned elsewhere stop being
// warm, pending drops of the assigned ones are cancelled. All stop being
// warm unless gen directly follows the revoking generation: a member
// paused past the session timeout revokes only when it wakes, after
// others ran them, and its copy would be a stale read.
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
