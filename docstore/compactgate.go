package docstore

import (
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// maxHeldSublevels is how deep level 0 may grow while a bulk load holds
// compactions back: past it they run again until it is shallower. Every
// sublevel is one more place a point read looks (behind a Bloom filter).
const maxHeldSublevels = 64

// compactionGate is the store's Pebble compaction scheduler: Pebble's own
// policy (as many compactions as the database allows, granted every
// 100 ms and whenever one ends), except that while a bulk load lasts
// (hold) no compaction starts, unless level 0 is past maxHeldSublevels.
// A bulk load's files all overlap in level 0: compacted as they come, each
// compaction rewrites the whole table below again (work growing with the
// square of the files); held back, they are merged once, when it ends.
// Safe for concurrent use (Pebble calls it from its own goroutines).
type compactionGate struct {
	mu           sync.Mutex
	db           pebble.DBForCompaction // set by Register
	running      int
	held         int  // bulk loads in progress
	over         bool // level 0 is past maxHeldSublevels
	granting     bool // a grant loop runs (one at a time)
	maxSublevels int  // maxHeldSublevels (tests lower it)
	log          *slog.Logger
	closed       bool
	idle         *sync.Cond // signalled when granting ends
	poke         chan struct{}
	stop         chan struct{}
	stopped      chan struct{}
}

var _ pebble.CompactionScheduler = (*compactionGate)(nil)
var _ pebble.CompactionGrantHandle = (*compactionGate)(nil)

func newCompactionGate(log *slog.Logger) *compactionGate {
	g := &compactionGate{maxSublevels: maxHeldSublevels, log: log,
		poke: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	g.idle = sync.NewCond(&g.mu)
	return g
}

// Register starts the periodic grants (pebble.CompactionScheduler).
func (g *compactionGate) Register(_ int, db pebble.DBForCompaction) {
	g.db = db
	go g.granter()
}

// Unregister stops granting and waits for a grant in progress.
func (g *compactionGate) Unregister() {
	close(g.stop)
	<-g.stopped
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for g.granting {
		g.idle.Wait()
	}
}

// TrySchedule grants a compaction Pebble asks for when none is held back
// and the database allows one more.
func (g *compactionGate) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.heldLocked() || g.db.GetAllowedWithoutPermission() <= g.running {
		return false, nil
	}
	g.running++
	return true, g
}

// UpdateGetAllowedWithoutPermission grants at once what a flush allowed.
func (g *compactionGate) UpdateGetAllowedWithoutPermission() { g.wake() }

// Started, MeasureCPU and CumulativeStats (grant handle reports) are unused.
func (g *compactionGate) Started()                                          {}
func (g *compactionGate) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (g *compactionGate) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done ends a granted compaction and grants what waits.
func (g *compactionGate) Done() {
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
	g.grant()
}

func (g *compactionGate) heldLocked() bool { return g.held > 0 && !g.over }

// wake has the granter grant at once.
func (g *compactionGate) wake() {
	select {
	case g.poke <- struct{}{}:
	default:
	}
}

// hold holds compactions back for one more bulk load (on) or ends one
// (off): with the last one ended, what waited is granted.
func (g *compactionGate) hold(on bool) {
	g.mu.Lock()
	if on {
		g.held++
	} else {
		g.held--
	}
	g.mu.Unlock()
	g.wake()
}

// level0 records level 0's depth after an ingestion (see maxHeldSublevels).
func (g *compactionGate) level0(sublevels int) {
	g.mu.Lock()
	over := sublevels >= g.maxSublevels
	changed := over != g.over && g.held > 0
	g.over = over
	g.mu.Unlock()
	if changed {
		g.log.Info("docstore bulk load: level 0 against its cap", "sublevels", sublevels, "cap", g.maxSublevels, "compactions_run", over)
	}
	g.wake()
}

// granter grants waiting compactions every 100 ms and when woken, as
// Pebble's scheduler does (Pebble stops asking once refused).
func (g *compactionGate) granter() {
	defer close(g.stopped)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-g.poke:
		case <-g.stop:
			return
		}
		g.grant()
	}
}

// grant starts the compactions Pebble has waiting, as many as allowed.
func (g *compactionGate) grant() {
	g.mu.Lock()
	n := 0
	if !g.closed && !g.granting && !g.heldLocked() {
		n = g.db.GetAllowedWithoutPermission() - g.running
	}
	if n <= 0 {
		g.mu.Unlock()
		return
	}
	g.granting = true
	g.mu.Unlock()
	for ; n > 0; n-- {
		if waiting, _ := g.db.GetWaitingCompaction(); !waiting || !g.db.Schedule(g) {
			break
		}
		g.mu.Lock()
		g.running++
		g.mu.Unlock()
	}
	g.mu.Lock()
	g.granting = false
	g.idle.Broadcast()
	g.mu.Unlock()
}
