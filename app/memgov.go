package app

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// governEvery is how often the memory governor re-plans.
const governEvery = 200 * time.Millisecond

// The cache budget follows the live heap: above liveHighPercent of Go's
// share the collector runs too often, so the budget shrinks by a fifth;
// below liveLowPercent it grows by a quarter (undoing a shrink), up to the
// engine's default. A live heap at half the limit makes the collector work
// about as often as GOGC=100 without one.
const (
	liveHighPercent = 50
	liveLowPercent  = 35
)

// An elastic plan (the default target) rises to fit the live heap when it
// stays over elasticPercent of Go's share for elasticLooks looks in a row
// (a second) with nothing left to shrink: the process's live data needs
// more than the target, and a collector held under it would run all the time.
const (
	elasticPercent = 70
	elasticLooks   = 5
)

// memoryGovernor shares a memory limit (a memoryPlan) out at run time: it
// moves an automatic cache budget with the live heap (which holds clover's
// block cache and memtables too, so the budget gives way as they fill), and
// raises an elastic plan the live heap outgrew. It runs on one goroutine
// (run); nothing else may set Go's memory limit meanwhile.
type memoryGovernor struct {
	plan       memoryPlan
	tight      int          // looks in a row the live heap was over elasticPercent with nothing to shrink
	live       func() int64 // the live heap after the last collection, bytes
	engines    []cacheBudgeter
	autoBudget bool // --cache-budget-docs 0 (automatic)
	budget     int  // the automatic budget in effect, per job
	log        *slog.Logger
}

// cacheBudgeter is an engine whose cache budget the governor sets.
type cacheBudgeter interface{ SetCacheBudget(n int) }

var _ cacheBudgeter = (*engine.Engine)(nil)

// minBudget and maxBudget bound the automatic budget, per job.
func (g *memoryGovernor) minBudget() int { return minAutoCacheBudgetDocs / max(len(g.engines), 1) }
func (g *memoryGovernor) maxBudget() int { return defaultCacheBudgetDocs / max(len(g.engines), 1) }

// raise lifts an elastic plan, and Go's memory limit with it, after
// elasticLooks tight looks: to where the live heap is liveHighPercent of
// Go's share, as GOGC=100 would leave it. A limit the operator or the
// container set is never raised: there the collector works harder instead.
func (g *memoryGovernor) raise(live int64) {
	if !g.plan.elastic() {
		return
	}
	if live*100 <= (g.plan.goMiB<<20)*elasticPercent || (g.autoBudget && g.budget > g.minBudget()) {
		g.tight = 0
		return
	}
	if g.tight++; g.tight < elasticLooks {
		return
	}
	g.tight = 0
	p := &g.plan
	was := p.totalMiB
	p.setTotal(((live>>20)*100/liveHighPercent+baseMiB)*100/(100-headroomPercent) + 1)
	debug.SetMemoryLimit(p.goMiB << 20)
	g.log.Info("memory target raised: the live heap needs more (--memory-limit-mib sets a fixed limit)", "target_mib", p.totalMiB, "was_mib", was, "live_mib", live>>20, "go_mib", p.goMiB)
}

// step re-plans once.
func (g *memoryGovernor) step() {
	live := g.live()
	g.raise(live)
	if !g.autoBudget {
		return
	}
	share := g.plan.goMiB << 20
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
	g.log.Debug("cache budget re-planned", "go_mib", g.plan.goMiB, "live_mib", live>>20, "cache_budget_docs", budget)
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

// run re-plans every governEvery until ctx ends.
func (g *memoryGovernor) run(ctx context.Context) {
	t := time.NewTicker(governEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.step()
		}
	}
}
