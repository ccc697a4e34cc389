package engine

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

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
	// Replayed is how many changelog records this instance has replayed
	// into its copy of the partition since it started (restores, standby
	// and warm-up catch-ups); ReplayPerSec their rate over the last second
	// or more: a restoring active's or a catching-up copy's restore rate,
	// a caught-up standby's tailing rate.
	Replayed     int64   `json:"replayed"`
	ReplayPerSec float64 `json:"replayPerSec"`
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
	at := time.Now()
	for i := range out {
		m := e.meters.get(out[i].Partition)
		out[i].Replayed, out[i].ReplayPerSec = m.n.Load(), m.perSecond(at)
	}
	return out
}

// replayMeters count the changelog records replayed per partition. Safe
// for concurrent use.
type replayMeters struct{ m sync.Map } // int32 -> *replayMeter

// get returns partition p's meter, made on first use.
func (ms *replayMeters) get(p int32) *replayMeter {
	if m, ok := ms.m.Load(p); ok {
		return m.(*replayMeter)
	}
	m, _ := ms.m.LoadOrStore(p, &replayMeter{})
	return m.(*replayMeter)
}

// replayMeter counts one partition's replayed records (n, one atomic add
// a record) and derives their rate when read, over at least a second.
type replayMeter struct {
	n atomic.Int64

	mu   sync.Mutex
	at   time.Time // when last and rate were taken
	last int64
	rate float64
}

// perSecond returns the records replayed per second between the reading
// at least a second before now and now (the previous rate when the last
// reading is more recent; 0 at the first).
func (m *replayMeter) perSecond(now time.Time) float64 {
	n := m.n.Load()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at.IsZero() {
		m.at, m.last = now, n
		return 0
	}
	if dt := now.Sub(m.at); dt >= time.Second {
		m.rate = float64(n-m.last) / dt.Seconds()
		m.at, m.last = now, n
	}
	return m.rate
}
