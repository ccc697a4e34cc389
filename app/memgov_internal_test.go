package app

import (
	"runtime/debug"
	"testing"

	"github.com/keepstate/keepstate/docstore"
)

// budgetRecorder is a cacheBudgeter that remembers the last budget.
type budgetRecorder struct{ n int }

func (b *budgetRecorder) SetCacheBudget(n int) { b.n = n }

// TestMemoryGovernorShare checks how the governor shares a 300 MiB limit
// between Go and the store's block cache and memtables as they fill: the
// rest goes to Go, counted at their largest so far, with room for the
// block cache to grow as much as it did over the last second (16 MiB at
// least) and for the next memtable, never below the plan's worst case.
func TestMemoryGovernorShare(t *testing.T) {
	const mib = 1 << 20
	plan := memoryPlan{totalMiB: 300, goMiB: 300 - 176 - 9, offHeap: 176, headroom: 9, source: "flag"}
	mem := func(cacheMiB, tablesMiB int64, count int) docstore.Memory {
		return docstore.Memory{BlockCache: cacheMiB * mib, BlockCacheMax: 64 * mib, Memtables: tablesMiB * mib, Memtable: 16 * mib, MemtableCount: count}
	}
	g := &memoryGovernor{plan: plan, goMiB: plan.goMiB}
	for _, tc := range []struct {
		name string
		m    docstore.Memory
		want int64
	}{
		// 48 base + (0 + 16 margin) + 3 memtables (the least counted) + 9
		{"empty store", mem(0, 16, 1), 300 - 48 - 16 - 48 - 9},
		{"cache grew 8 MiB: the margin stays 16", mem(8, 16, 1), 300 - 48 - 24 - 48 - 9},
		{"cache grew 40 MiB in a second: as much again, up to its size", mem(40, 16, 1), 300 - 48 - 64 - 48 - 9},
		{"three memtables and the next: the plan's worst case", mem(64, 48, 3), plan.goMiB},
		{"what the store freed is not handed back", mem(10, 16, 1), plan.goMiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := g.goShare(tc.m); got != tc.want {
				t.Errorf("goShare = %d MiB; want %d", got, tc.want)
			}
		})
	}
}

// TestMemoryGovernorStep checks one re-plan: Go's memory limit follows
// the share, and an automatic cache budget shrinks by a fifth when the
// live heap is over half of it, grows by a quarter (up to the default)
// when under 35 %, and is left alone otherwise or when the operator set
// it.
func TestMemoryGovernorStep(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	const mib = 1 << 20
	plan := memoryPlan{totalMiB: 300, goMiB: 115, offHeap: 176, headroom: 9, source: "flag"}
	empty := docstore.Memory{BlockCacheMax: 64 * mib, Memtable: 16 * mib, MemtableCount: 1}
	const share = 300 - 48 - 16 - 48 - 9 // goShare of empty
	for _, tc := range []struct {
		name       string
		auto       bool
		budget     int
		liveMiB    int64
		wantBudget int
	}{
		{"live over half: shrink", true, 10000, share/2 + 1, 8000},
		{"live under 35 %: grow", true, 10000, share / 4, 12500},
		{"grows no further than the default", true, defaultCacheBudgetDocs, share / 4, defaultCacheBudgetDocs},
		{"shrinks no further than the least", true, minAutoCacheBudgetDocs, share, minAutoCacheBudgetDocs},
		{"in between: left alone", true, 10000, share * 2 / 5, 10000},
		{"set by the operator: left alone", false, 10000, share, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &budgetRecorder{}
			g := &memoryGovernor{plan: plan, goMiB: plan.goMiB, autoBudget: tc.auto, budget: tc.budget,
				memory: func() docstore.Memory { return empty }, live: func() int64 { return tc.liveMiB * mib },
				engines: []cacheBudgeter{rec}, log: discardLogger(nil)}
			rec.n = 0
			g.step()
			if got := debug.SetMemoryLimit(-1); got != share*mib {
				t.Errorf("Go's memory limit = %d MiB; want %d", got/mib, share)
			}
			want := tc.wantBudget
			if !tc.auto || want == tc.budget {
				want = 0 // not called
			}
			if rec.n != want {
				t.Errorf("budget set to %d; want %d (0: not set)", rec.n, want)
			}
			if tc.auto && g.budget != tc.wantBudget {
				t.Errorf("budget in effect %d; want %d", g.budget, tc.wantBudget)
			}
		})
	}
}

// TestMemoryGovernorRaise checks the elastic default target: it rises
// (Go's limit and the valve's bound with it) only after the live heap has
// stayed over 70 % of Go's share for five looks in a row with nothing left
// to shrink, to where the live heap is half of Go's share and by a quarter
// at least; a limit the operator set never rises, and a process without C
// caches (Redis, no cgo) keeps the plan's share.
func TestMemoryGovernorRaise(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	const mib = 1 << 20
	redis := Default()
	redis.Store = StoreRedis
	def, err := planMemory(redis, 0, true)
	if err != nil || !def.elastic() || def.totalMiB != DefaultMemoryTargetMiB {
		t.Fatalf("planMemory(redis, defaults) = %+v, %v; want the elastic %d MiB target", def, err, DefaultMemoryTargetMiB)
	}
	clover, err := planMemory(Default(), 0, true)
	if err != nil || !clover.elastic() || clover.goMiB != 115 {
		t.Fatalf("planMemory(clover, defaults) = %+v, %v; want the elastic target with 115 MiB for Go", clover, err)
	}
	fixed := def
	fixed.source = "flag"
	over := def.goMiB*elasticPercent/100 + 1 // 171 MiB of live heap: just over the bound
	// Fitted: 2×171 MiB for Go, 48 for the binary, 3 % headroom.
	const fitOver = (171*2+48)*100/97 + 1
	const far = 1000 // MiB
	const fitFar = (far*2+48)*100/97 + 1
	cloverOver := clover.goMiB*elasticPercent/100 + 1 // 81 MiB: fitted it needs less than a quarter more
	for _, tc := range []struct {
		name      string
		plan      memoryPlan
		auto      bool
		budget    int
		liveMiB   []int64 // one per look
		wantTotal int64
	}{
		{"over for five looks, budget at its floor: raised to fit", def, true, minAutoCacheBudgetDocs, []int64{over, over, over, over, over}, fitOver},
		{"over for four looks: not yet", def, true, minAutoCacheBudgetDocs, []int64{over, over, over, over}, 300},
		{"a look under starts the count again", def, true, minAutoCacheBudgetDocs, []int64{over, over, over, over - 2, over, over, over, over}, 300},
		{"the budget can still shrink: not raised", def, true, 10000, []int64{over, over, over, over, over}, 300},
		{"a budget the operator set: raised", def, false, 10000, []int64{over, over, over, over, over}, fitOver},
		{"a limit the operator set: never raised", fixed, true, minAutoCacheBudgetDocs, []int64{over, over, over, over, over, over, over}, 300},
		{"far over: once, to fit, not a quarter at a time", def, false, 0, []int64{far, far, far, far, far, far, far, far, far, far}, fitFar},
		{"a little over: a quarter at least", clover, false, 0, []int64{cloverOver, cloverOver, cloverOver, cloverOver, cloverOver}, 375},
	} {
		t.Run(tc.name, func(t *testing.T) {
			valve := trimValve(Default(), tc.plan, nil).Bound // clover's valve, moved by the raise
			look := 0
			g := &memoryGovernor{plan: tc.plan, goMiB: tc.plan.goMiB, autoBudget: tc.auto, budget: tc.budget, valve: valve,
				live: func() int64 { return tc.liveMiB[look] * mib }, engines: []cacheBudgeter{&budgetRecorder{}}, log: discardLogger(nil)}
			for look = range tc.liveMiB {
				g.step()
			}
			if g.plan.totalMiB != tc.wantTotal {
				t.Fatalf("target = %d MiB; want %d", g.plan.totalMiB, tc.wantTotal)
			}
			wantGo := tc.wantTotal - tc.plan.offHeap - tc.wantTotal*headroomPercent/100
			if got := debug.SetMemoryLimit(-1); tc.wantTotal != 300 && got != wantGo*mib {
				t.Errorf("Go's memory limit = %d MiB; want %d", got/mib, wantGo)
			}
			if g.goMiB != wantGo {
				t.Errorf("Go's share = %d MiB; want %d", g.goMiB, wantGo)
			}
			if got, want := valve.Load(), valveBound(tc.wantTotal); got != want {
				t.Errorf("valve bound = %d MiB; want %d", got/mib, want/mib)
			}
		})
	}
}
