package engine

import "slices"

// Partition roles on an instance: the active runs the partition; a standby
// tails its changelog into the local store (see standby.go); a warm-up is
// a standby the assignor placed where the balance wants the partition to
// move once it is caught up.
const (
	RoleActive  = "active"
	RoleStandby = "standby"
	RoleWarmup  = "warmup"
)

// PartitionRole is one partition held on this instance, as GET /api/stats
// and /metrics show it.
type PartitionRole struct {
	Partition int32 `json:"partition"`
	// Role is RoleActive, RoleStandby or RoleWarmup.
	Role string `json:"role"`
	// State is an active's RESTORING or RUNNING.
	State string `json:"state,omitempty"`
	// LagRecords is how many changelog offsets a standby was behind at its
	// last read; LagMs how long ago that read ended (-1: none yet).
	LagRecords int64 `json:"lagRecords"`
	LagMs      int64 `json:"lagMs"`
}

// Roles returns the partitions this instance holds, by partition: its
// actives and its standbys. Safe for concurrent use.
func (e *Engine) Roles() []PartitionRole {
	var out []PartitionRole
	for p, st := range e.route.Partitions() {
		out = append(out, PartitionRole{Partition: p, Role: RoleActive, State: st.String()})
	}
	now := monoNow()
	for _, r := range e.standby.list() {
		pr := PartitionRole{Partition: r.p, Role: RoleStandby, LagMs: -1}
		if r.warmup.Load() {
			pr.Role = RoleWarmup
		}
		if n, age, ok := r.lag(now); ok {
			pr.LagRecords, pr.LagMs = n, age.Milliseconds()
		}
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b PartitionRole) int { return int(a.Partition - b.Partition) })
	return out
}
