package app

import (
	"runtime/debug"
	"testing"
)

// budgetRecorder is a cacheBudgeter that remembers the last budget.
type budgetRecorder struct{ n int }

func (b *budgetRecorder) SetCacheBudget(n int) { b.n = n }

// sentinelLimit sets Go's memory limit to a value no plan makes, for the
// test's duration, and returns it: a step that leaves the limit alone
// leaves it there.
func sentinelLimit(t *testing.T) int64 {
	t.Helper()
	const sentinel = 12345 << 20
	old := debug.SetMemoryLimit(sentinel)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	return sentinel
}

// TestMemoryGovernorStep checks one re-plan under a limit that never
// rises: an automatic cache budget shrinks by a fifth when the live heap
// is over half of Go's share, grows by a quarter (up to the default) when
// under 35 %, and is left alone otherwise or when the operator set it;
// the plan and Go's memory limit stay where they are.
func TestMemoryGovernorStep(t *testing.T) {
	const mib = 1 << 20
	plan, err := planMemory(with300(Default()), 0)
	if err != nil || plan.goMiB != 243 {
		t.Fatalf("planMemory(--memory-limit-mib 300) = %+v, %v; want 243 MiB for Go", plan, err)
	}
	const share = 243
	for _, tc := range []struct {
		name       string
		auto       bool
		budget     int
		liveMiB    int64
		wantBudget int // 0: not set
	}{
		{"live over half: shrink by a fifth", true, 10000, share/2 + 1, 8000},
		{"live under 35 %: grow by a quarter", true, 10000, share / 4, 12500},
		{"grows no further than the default", true, defaultCacheBudgetDocs, share / 4, 0},
		{"shrinks no further than the least", true, minAutoCacheBudgetDocs, share, 0},
		{"in between: left alone", true, 10000, share * 2 / 5, 0},
		{"set by the operator: left alone", false, 10000, share, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit := sentinelLimit(t)
			rec := &budgetRecorder{}
			g := &memoryGovernor{plan: plan, autoBudget: tc.auto, budget: tc.budget,
				live: func() int64 { return tc.liveMiB * mib }, engines: []cacheBudgeter{rec}, log: discardLogger(nil)}
			g.step()
			if rec.n != tc.wantBudget {
				t.Errorf("budget set to %d; want %d (0: not set)", rec.n, tc.wantBudget)
			}
			want := tc.wantBudget
			if want == 0 {
				want = tc.budget
			}
			if g.budget != want {
				t.Errorf("budget in effect %d; want %d", g.budget, want)
			}
			if g.plan != plan {
				t.Errorf("plan = %+v; want %+v", g.plan, plan)
			}
			if got := debug.SetMemoryLimit(-1); got != limit {
				t.Errorf("Go's memory limit = %d MiB; want it left alone", got/mib)
			}
		})
	}
}

// with300 is c under --memory-limit-mib 300.
func with300(c Config) Config { c.MemoryLimitMiB = 300; return c }

// TestMemoryGovernorRaise checks the elastic default target: it rises
// (and Go's memory limit with it) only after the live heap has stayed over
// 70 % of Go's share for five looks in a row with nothing left to shrink,
// to where the live heap is half of Go's share; a limit the operator set
// never rises.
func TestMemoryGovernorRaise(t *testing.T) {
	const mib = 1 << 20
	def, err := planMemory(Default(), 0)
	if err != nil || !def.elastic() || def.totalMiB != DefaultMemoryTargetMiB || def.goMiB != 243 {
		t.Fatalf("planMemory(defaults) = %+v, %v; want the elastic %d MiB target with 243 MiB for Go", def, err, DefaultMemoryTargetMiB)
	}
	fixed := def
	fixed.source = "flag"
	over := def.goMiB*elasticPercent/100 + 1 // 171 MiB of live heap: just over the bound
	// Fitted: 2×171 MiB for Go, 48 for the binary, 3 % headroom.
	const fitOver = (171*2+48)*100/97 + 1
	const far = 1000 // MiB
	const fitFar = (far*2+48)*100/97 + 1
	for _, tc := range []struct {
		name      string
		plan      memoryPlan
		auto      bool
		budget    int
		liveMiB   []int64 // one per look
		wantTotal int64   // 0: not raised
	}{
		{"over for five looks, budget at its floor: raised to fit", def, true, minAutoCacheBudgetDocs, []int64{over, over, over, over, over}, fitOver},
		{"over for four looks: not yet", def, true, minAutoCacheBudgetDocs, []int64{over, over, over, over}, 0},
		{"a look under starts the count again", def, true, minAutoCacheBudgetDocs, []int64{over, over, over, over - 2, over, over, over, over}, 0},
		{"the budget can still shrink: not raised", def, true, 10000, []int64{over, over, over, over, over}, 0},
		{"a budget the operator set: raised", def, false, 10000, []int64{over, over, over, over, over}, fitOver},
		{"a limit the operator set: never raised", fixed, true, minAutoCacheBudgetDocs, []int64{over, over, over, over, over, over, over}, 0},
		{"far over: once, to fit", def, false, 0, []int64{far, far, far, far, far, far, far, far, far, far}, fitFar},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit := sentinelLimit(t)
			look := 0
			g := &memoryGovernor{plan: tc.plan, autoBudget: tc.auto, budget: tc.budget,
				live: func() int64 { return tc.liveMiB[look] * mib }, engines: []cacheBudgeter{&budgetRecorder{}}, log: discardLogger(nil)}
			for look = range tc.liveMiB {
				g.step()
			}
			if tc.wantTotal == 0 {
				if g.plan != tc.plan {
					t.Errorf("plan = %+v; want %+v (not raised)", g.plan, tc.plan)
				}
				if got := debug.SetMemoryLimit(-1); got != limit {
					t.Errorf("Go's memory limit = %d MiB; want it left alone", got/mib)
				}
				return
			}
			if g.plan.totalMiB != tc.wantTotal || !g.plan.elastic() {
				t.Fatalf("plan = %+v; want an elastic target of %d MiB", g.plan, tc.wantTotal)
			}
			wantGo := tc.wantTotal - baseMiB - tc.wantTotal*headroomPercent/100
			if g.plan.goMiB != wantGo {
				t.Errorf("Go's share = %d MiB; want %d", g.plan.goMiB, wantGo)
			}
			if got := debug.SetMemoryLimit(-1); got != wantGo*mib {
				t.Errorf("Go's memory limit = %d MiB; want %d", got/mib, wantGo)
			}
			if last := tc.liveMiB[len(tc.liveMiB)-1]; last*100 > g.plan.goMiB*liveHighPercent || last*100 < g.plan.goMiB*(liveHighPercent-2) {
				t.Errorf("after the raise the live heap (%d MiB) is not about half of Go's share (%d MiB)", last, g.plan.goMiB)
			}
		})
	}
}
