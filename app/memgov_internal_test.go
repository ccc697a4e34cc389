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
// live heap is over half of it, grows by a tenth (up to the default)
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
		{"live under 35 %: grow", true, 10000, share / 4, 11000},
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
