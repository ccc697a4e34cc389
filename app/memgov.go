package app

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
)

// governEvery is how often the memory governor re-plans.
const governEvery = 200 * time.Millisecond

// minMemtables is the fewest memtables the governor leaves room for: a
// heavy write load has three at a time (one written, two flushing; see
// docstore.MaxMemtables), and Go's heap gives memory back more slowly
// than Pebble allocates a memtable (a uniform 1M-movie run reserving one
// more than there were peaked at 295-296 MiB under 300).
const minMemtables = 3

// growthWindow is how many looks (governEvery apart: one second) the
// block cache's recent growth is taken over.
const growthWindow = 5

// freeOnDropMiB is the drop of Go's share at which the governor returns
// Go's free memory to the system at once (debug.FreeOSMemory, a forced
// collection): a uniform 1M-movie run, whose block cache fills in its
// first seconds, peaked at 303 MiB under 300 without it.
const freeOnDropMiB = 8

// blockCacheMarginMiB is the growth of the block cache the governor
// leaves room for until its next look: a uniform 1M-movie run reads a
// few tens of MiB of blocks per second while the cache fills.
const blockCacheMarginMiB = 16

// The cache budget follows the live heap (what the last collection kept):
// above liveHighPercent of Go's share the collector has too little room
// and runs too often, so the budget shrinks by a fifth; below
// liveLowPercent it grows by a quarter (the shrink undone), up to the
// engine's default: a tenth took a Zipf run's budget 3.5 s of its 7 s
// to climb from the plan's 13800 to 30000 (docs/benchmarks.md). A
// collector with its live heap at half its limit works about as often as
// GOGC=100 makes it without one.
const (
	liveHighPercent = 50
	liveLowPercent  = 35
)

// The default memory target is elastic (memoryPlan.elastic): when the
// live heap stays over elasticPercent of Go's share for elasticLooks looks
// in a row (a second) with nothing left to shrink (the automatic cache
// budget at its floor, or a budget the operator set), the process's live
// data needs more than the target, and a collector held under it would run
// all the time; the target then rises to fit the live heap (see raise), by
// elasticGrowPercent at least.
const (
	elasticPercent     = 70
	elasticLooks       = 5
	elasticGrowPercent = 25
)

// memoryGovernor shares a memory limit (a memoryPlan) out at run time.
// With cgo (malloc.OffHeap) and clover, where the store's caches are C
// memory, it moves Go's share with them (memory set); with any store it
// moves an automatic cache budget with the live heap, and raises an
// elastic plan (the default target) that the live heap outgrew.
// planMemory leaves room for clover's block cache and memtables at their
// largest, since they live outside Go's heap; a workload that fills
// neither (a few tens of thousands of hot movies) then runs its collector
// against a Go share a third smaller than it could have (Zipf ratings
// lost 21-23 % under a 300 MiB limit, docs/benchmarks.md). The governor
// looks at what the store holds (docstore.Store.Memory) every
// governEvery and gives Go the rest: the limit less baseMiB, the block
// cache at its largest so far plus blockCacheMarginMiB, the memtables at
// their largest plus the next one (at least minMemtables), and the
// headroom; never less than the plan's share. An
// automatic cache budget starts where the plan put it (cacheBudgetDocs,
// sized for the worst case) and follows the live heap (liveHighPercent).
// It runs on one goroutine (run); nothing else may set Go's memory limit
// meanwhile.
type memoryGovernor struct {
	plan memoryPlan
	// memory reads what clover's C caches hold; nil when the store has
	// none (Redis, or Pebble in Go's heap without cgo): Go's share is then
	// the plan's.
	memory     func() docstore.Memory
	valve      *atomic.Int64 // the C allocator valve's bound (malloc.Valve), moved with a raised plan; may be nil
	tight      int           // looks in a row the live heap was over elasticPercent with nothing to shrink
	live       func() int64  // the live heap after the last collection, bytes
	engines    []cacheBudgeter
	autoBudget bool // --cache-budget-docs 0 (automatic)
	budget     int  // the automatic budget in effect, per job
	log        *slog.Logger
	goMiB      int64 // Go's share in effect
	// cacheHigh and tablesHigh are the most bytes the block cache and
	// the memtables have held.
	cacheHigh, tablesHigh int64
	cacheSeen             []int64 // cacheHigh at the last growthWindow looks
}

// goShare returns Go's share of the limit, in MiB, when the store holds
// m. It counts the most the block cache and the memtables have held
// (while the governor watched), not what they hold now: what Pebble frees
// stays resident in the C allocator's arenas until the valve
// (malloc.Valve) hands it back at 90 % of the limit (counting the block
// cache as it is let a uniform 1M-movie run peak at 318-323 MiB under
// 300, before the valve).
func (g *memoryGovernor) goShare(m docstore.Memory) int64 {
	const mib = 1 << 20
	g.cacheHigh = max(g.cacheHigh, m.BlockCache)
	g.tablesHigh = max(g.tablesHigh, m.Memtables, int64(m.MemtableCount)*m.Memtable)
	// The block cache may grow by as much before the next look as it
	// grew over the last second (a uniform run's first fill takes about
	// one), and by blockCacheMarginMiB at least.
	g.cacheSeen = append(g.cacheSeen, g.cacheHigh)
	if len(g.cacheSeen) > growthWindow {
		g.cacheSeen = g.cacheSeen[1:]
	}
	growth := g.cacheHigh - g.cacheSeen[0]
	cache := min(m.BlockCacheMax, g.cacheHigh+max(blockCacheMarginMiB*mib, growth))
	tables := min(docstore.MaxMemtables*m.Memtable, max(g.tablesHigh+m.Memtable, minMemtables*m.Memtable))
	off := baseMiB + (cache+tables+mib-1)/mib
	return max(g.plan.totalMiB-off-g.plan.headroom, g.plan.goMiB)
}

// cacheBudgeter is an engine whose cache budget the governor sets
// (*engine.Engine).
type cacheBudgeter interface{ SetCacheBudget(n int) }

var _ cacheBudgeter = (*engine.Engine)(nil)

// minBudget and maxBudget bound the automatic budget, per job.
func (g *memoryGovernor) minBudget() int {
	return minAutoCacheBudgetDocs / max(len(g.engines), 1)
}

func (g *memoryGovernor) maxBudget() int {
	return defaultCacheBudgetDocs / max(len(g.engines), 1)
}

// raise lifts an elastic plan once the live heap has stayed over
// elasticPercent of Go's share for elasticLooks looks with nothing left to
// shrink: to where the live heap is liveHighPercent of Go's share, and by
// elasticGrowPercent at least. A limit the operator or the container set is
// never raised: there the collector works harder instead.
func (g *memoryGovernor) raise(live int64) {
	if !g.plan.elastic() {
		return
	}
	if live*100 <= (g.goMiB<<20)*elasticPercent || (g.autoBudget && g.budget > g.minBudget()) {
		g.tight = 0
		return
	}
	if g.tight++; g.tight < elasticLooks {
		return
	}
	g.tight = 0
	p := &g.plan
	was := p.totalMiB
	// Enough for the live heap to be liveHighPercent of Go's share (as
	// GOGC=100 would leave it), and a quarter more at least: a heap that
	// grows fast would otherwise be chased a quarter at a time, with the
	// collector running all the time in between (a fill with a budget of
	// 1M documents took seven raises and a third more CPU).
	fit := ((live>>20)*100/liveHighPercent+p.offHeap)*100/(100-headroomPercent) + 1
	p.setTotal(max(p.totalMiB+p.totalMiB*elasticGrowPercent/100, fit))
	if g.valve != nil {
		g.valve.Store(valveBound(p.totalMiB))
	}
	g.log.Info("memory target raised: the live heap needs more (--memory-limit-mib sets a fixed limit)", "target_mib", p.totalMiB, "was_mib", was, "live_mib", live>>20, "go_mib", p.goMiB)
}

// step re-plans once.
func (g *memoryGovernor) step() {
	live := g.live()
	g.raise(live)
	goMiB := g.plan.goMiB
	if g.memory != nil {
		goMiB = g.goShare(g.memory())
	}
	if goMiB != g.goMiB {
		drop := g.goMiB - goMiB
		g.log.Debug("Go's memory share re-planned", "go_mib", goMiB, "was_mib", g.goMiB, "block_cache_high_mib", g.cacheHigh>>20, "memtables_high_mib", g.tablesHigh>>20)
		g.goMiB = goMiB
		debug.SetMemoryLimit(goMiB << 20)
		if drop >= freeOnDropMiB {
			// The store took memory Go held: give it back now rather than
			// at the scavenger's pace, or the process is over its limit
			// until then.
			debug.FreeOSMemory()
		}
	}
	if !g.autoBudget {
		return
	}
	share := g.goMiB << 20
	budget := g.budget
	switch {
	case live*100 > share*liveHighPercent:
		budget = max(budget*4/5, g.minBudget())
	case live*100 < share*liveLowPercent:
		budget = min(budget+budget/4, g.maxBudget())
	}
	if budget == g.budget {
		return
	}
	g.budget = budget
	for _, e := range g.engines {
		e.SetCacheBudget(budget)
	}
	g.log.Debug("cache budget re-planned", "go_mib", g.goMiB, "live_mib", live>>20, "cache_budget_docs", budget)
}

// liveHeap reads the live heap the last collection left (runtime/metrics).
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// run re-plans every governEvery until ctx ends, then puts back the
// plan's share (the store it watched is closing).
func (g *memoryGovernor) run(ctx context.Context) {
	t := time.NewTicker(governEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			debug.SetMemoryLimit(g.plan.goMiB << 20)
			return
		case <-t.C:
			g.step()
		}
	}
}
