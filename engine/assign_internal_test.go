package engine

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// ps returns the partitions lo..hi-1.
func ps(lo, hi int32) []int32 {
	var out []int32
	for p := lo; p < hi; p++ {
		out = append(out, p)
	}
	return out
}

// held returns copies of the partitions at offset off.
func held(off int64, parts ...[]int32) map[int32]int64 {
	m := map[int32]int64{}
	for _, list := range parts {
		for _, p := range list {
			m[p] = off
		}
	}
	return m
}

func counts(plan map[string]*memberPlan) map[string]int {
	out := map[string]int{}
	for id, mp := range plan {
		out[id] = len(mp.Actives)
	}
	return out
}

// checkPlan asserts what every plan must hold: each partition has one
// active, standbys are on other members, no member holds a partition twice.
func checkPlan(t *testing.T, plan map[string]*memberPlan, n int32, want int) {
	t.Helper()
	owner := map[int32]string{}
	reps := map[int32][]string{}
	for id, mp := range plan {
		for _, p := range mp.Actives {
			if o, ok := owner[p]; ok {
				t.Fatalf("partition %d active on %s and %s", p, o, id)
			}
			owner[p] = id
		}
		for _, p := range mp.Standbys {
			if slices.Contains(reps[p], id) {
				t.Fatalf("partition %d standby twice on %s", p, id)
			}
			reps[p] = append(reps[p], id)
		}
		for _, p := range mp.Warmups {
			if !slices.Contains(mp.Standbys, p) {
				t.Fatalf("warm-up %d of %s is not among its standbys %v", p, id, mp.Standbys)
			}
		}
	}
	for p := range n {
		if _, ok := owner[p]; !ok {
			t.Fatalf("partition %d has no active", p)
		}
		if slices.Contains(reps[p], owner[p]) {
			t.Fatalf("partition %d: standby on its active %s", p, owner[p])
		}
		if got := len(reps[p]); got < min(want, len(plan)-1) {
			t.Fatalf("partition %d: %d replicas, want %d", p, got, min(want, len(plan)-1))
		}
	}
}

func TestPlanPartitions(t *testing.T) {
	const lagOK = 100
	tests := []struct {
		name   string
		states map[string]memberState
		// wantActives, when set, is the exact active set per member.
		wantActives map[string][]int32
		wantWarmups map[string][]int32
		// wantStandbys, when set, is the exact standby set per member.
		wantStandbys map[string][]int32
		// balanced asks for max-min actives <= 1.
		balanced bool
		// standbysSpread asks for max-min standbys (warm-ups and lent
		// ones included) <= 1.
		standbysSpread bool
		// n is the partition count (12 when 0).
		n int32
	}{
		{
			name: "fresh group spreads evenly",
			states: map[string]memberState{
				"a": {}, "b": {}, "c": {},
			},
			balanced: true,
		},
		{
			name: "sticky: a balanced group keeps its actives",
			states: map[string]memberState{
				"a": {Actives: []int32{0, 5, 7, 9}, Copies: held(50, []int32{0, 5, 7, 9})},
				"b": {Actives: []int32{1, 2, 3, 4}, Copies: held(50, []int32{1, 2, 3, 4})},
				"c": {Actives: []int32{6, 8, 10, 11}, Copies: held(50, []int32{6, 8, 10, 11})},
			},
			wantActives: map[string][]int32{"a": {0, 5, 7, 9}, "b": {1, 2, 3, 4}, "c": {6, 8, 10, 11}},
		},
		{
			name: "scale-out: an empty member gets warm-ups, no active moves yet",
			states: map[string]memberState{
				"a": {Actives: ps(0, 4), Copies: held(50, ps(0, 4), ps(4, 6))},
				"b": {Actives: ps(4, 8), Copies: held(50, ps(4, 8), ps(8, 10))},
				"c": {Actives: ps(8, 12), Copies: held(50, ps(8, 12), ps(0, 2))},
				"d": {},
			},
			wantActives: map[string][]int32{"a": ps(0, 4), "b": ps(4, 8), "c": ps(8, 12), "d": nil},
			wantWarmups: map[string][]int32{"d": {3, 7, 11}},
		},
		{
			name: "scale-out: caught-up warm-ups take their actives",
			states: map[string]memberState{
				"a": {Actives: ps(0, 4), Copies: held(50, ps(0, 4))},
				"b": {Actives: ps(4, 8), Copies: held(50, ps(4, 8))},
				"c": {Actives: ps(8, 12), Copies: held(50, ps(8, 12))},
				"d": {Copies: held(40, []int32{3, 7, 11})},
			},
			wantActives: map[string][]int32{"a": ps(0, 3), "b": ps(4, 7), "c": ps(8, 11), "d": {3, 7, 11}},
			wantWarmups: map[string][]int32{},
		},
		{
			name: "scale-out: a warm-up too far behind waits",
			states: map[string]memberState{
				"a": {Actives: ps(0, 2), Copies: held(500, ps(0, 2))},
				"b": {Copies: held(10, ps(0, 2))},
			},
			n:           2,
			wantActives: map[string][]int32{"a": ps(0, 2), "b": nil},
			wantWarmups: map[string][]int32{"b": {1}},
		},
		{
			name: "member gone: its partitions go to their caught-up standbys",
			states: map[string]memberState{
				"a": {Actives: ps(0, 4), Copies: held(50, ps(0, 4), []int32{4, 5, 8, 9})},
				"b": {Actives: ps(4, 8), Copies: held(50, ps(4, 8), []int32{0, 1, 10, 11})},
			},
			balanced:    true,
			wantActives: map[string][]int32{"a": {0, 1, 2, 3, 8, 9}, "b": {4, 5, 6, 7, 10, 11}},
		},
		{
			name: "a paused member that fell behind loses its actives",
			states: map[string]memberState{
				"a": {Actives: ps(0, 2), Copies: held(10, ps(0, 2))},
				"b": {Actives: ps(2, 4), Copies: held(500, ps(0, 4))},
			},
			n:           4,
			wantActives: map[string][]int32{"a": nil, "b": ps(0, 4)},
			wantWarmups: map[string][]int32{"a": {2, 3}},
		},
		{
			// c got the standby of 0 while b was away and is still
			// replaying; b is back with a current copy.
			name: "standbys: a caught-up copy comes before a sticky standby still replaying",
			states: map[string]memberState{
				"a": {Actives: []int32{0}, Copies: map[int32]int64{0: 500, 1: 500}},
				"b": {Actives: []int32{1}, Copies: map[int32]int64{0: 495, 1: 500}},
				"c": {Standbys: []int32{0}, Copies: map[int32]int64{0: 10}},
			},
			n:            2,
			wantActives:  map[string][]int32{"a": {0}, "b": {1}, "c": nil},
			wantStandbys: map[string][]int32{"a": {1}, "b": {0}, "c": nil},
		},
		{
			// d joined and took its actives; every caught-up standby copy
			// is on a, b or c.
			name: "standbys: a member holding none borrows from those holding most",
			states: map[string]memberState{
				"a": {Actives: ps(0, 3), Standbys: []int32{3, 4, 5, 9}, Copies: held(50, ps(0, 6), []int32{9})},
				"b": {Actives: ps(3, 6), Standbys: []int32{6, 7, 8, 10}, Copies: held(50, ps(3, 9), []int32{10})},
				"c": {Actives: ps(6, 9), Standbys: []int32{0, 1, 2, 11}, Copies: held(50, ps(0, 3), ps(6, 9), []int32{11})},
				"d": {Actives: ps(9, 12), Copies: held(50, ps(9, 12))},
			},
			wantActives:    map[string][]int32{"a": ps(0, 3), "b": ps(3, 6), "c": ps(6, 9), "d": ps(9, 12)},
			standbysSpread: true,
		},
		{
			name: "shared store: sticky and balanced, no standbys",
			states: map[string]memberState{
				"a": {Shared: true, Actives: ps(0, 6)},
				"b": {Shared: true, Actives: ps(6, 12)},
				"c": {Shared: true},
			},
			balanced: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ids []string
			for id := range tc.states {
				ids = append(ids, id)
			}
			n := cmp.Or(tc.n, 12)
			plan := planPartitions(ids, tc.states, n, 1, lagOK)
			shared := tc.states[ids[0]].Shared
			if shared {
				for id, mp := range plan {
					if len(mp.Standbys)+len(mp.Warmups) > 0 {
						t.Errorf("%s: standbys %v warmups %v on a shared store", id, mp.Standbys, mp.Warmups)
					}
				}
				checkPlan(t, plan, n, 0)
			} else {
				checkPlan(t, plan, n, 1)
			}
			for id, want := range tc.wantActives {
				if got := plan[id].Actives; !slices.Equal(got, want) {
					t.Errorf("%s actives = %v, want %v", id, got, want)
				}
			}
			if tc.wantWarmups != nil {
				for id, mp := range plan {
					if got, want := mp.Warmups, tc.wantWarmups[id]; !slices.Equal(got, want) {
						t.Errorf("%s warm-ups = %v, want %v", id, got, want)
					}
				}
			}
			for id, want := range tc.wantStandbys {
				if got := plan[id].Standbys; !slices.Equal(got, want) {
					t.Errorf("%s standbys = %v, want %v", id, got, want)
				}
			}
			if tc.balanced {
				c := counts(plan)
				lo, hi := int(n), 0
				for _, v := range c {
					lo, hi = min(lo, v), max(hi, v)
				}
				if hi-lo > 1 {
					t.Errorf("actives per member %v: max-min = %d, want <= 1", c, hi-lo)
				}
			}
			if tc.standbysSpread {
				lo, hi := int(n), 0
				for _, mp := range plan {
					lo, hi = min(lo, len(mp.Standbys)), max(hi, len(mp.Standbys))
				}
				if hi-lo > 1 {
					t.Errorf("standbys per member: max-min = %d, want <= 1 (%v %v %v %v)", hi-lo,
						plan["a"].Standbys, plan["b"].Standbys, plan["c"].Standbys, plan["d"].Standbys)
				}
			}
			if shared {
				if got := plan["a"].Actives; len(got) != 4 || slices.ContainsFunc(got, func(p int32) bool { return p >= 6 }) {
					t.Errorf("shared: a actives = %v, want four of its own %v", got, ps(0, 6))
				}
			}
		})
	}
}

// TestPlanConverges runs the protocol's loop on random groups: members
// report what the last plan gave them, warm-ups catch up, and within a few
// rounds the actives are balanced with no warm-up left, and no active ever
// goes to a member beyond the acceptable lag while another was within it.
func TestPlanConverges(t *testing.T) {
	for seed := range 200 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		n := int32(1 + rng.IntN(16))
		k := 1 + rng.IntN(5)
		states := map[string]memberState{}
		var ids []string
		for i := range k {
			id := fmt.Sprintf("m%d", i)
			ids = append(ids, id)
			st := memberState{Copies: map[int32]int64{}}
			for p := range n {
				if rng.IntN(3) == 0 {
					st.Copies[p] = int64(rng.IntN(300))
				}
			}
			states[id] = st
		}
		const lagOK = 100
		for round := 0; ; round++ {
			plan := planPartitions(ids, states, n, 1, lagOK)
			checkPlan(t, plan, n, 1)
			// Settled: no warm-ups and no lent standbys (a partition with
			// more replicas than asked for).
			warm, reps := 0, map[int32]int{}
			for _, mp := range plan {
				warm += len(mp.Warmups)
				for _, p := range mp.Standbys {
					reps[p]++
				}
			}
			for _, r := range reps {
				if r > min(1, k-1) {
					warm++
				}
			}
			if warm == 0 {
				c := counts(plan)
				lo, hi := int(n), 0
				for _, v := range c {
					lo, hi = min(lo, v), max(hi, v)
				}
				if hi-lo > 1 {
					t.Fatalf("seed %d: settled unbalanced %v", seed, c)
				}
				// Settled means stable: planning again from what the
				// plan gave changes nothing (no standby moves around).
				again := planPartitions(ids, reported(plan, states), n, 1, lagOK)
				if !reflect.DeepEqual(again, plan) {
					t.Fatalf("seed %d: a settled plan changed when planned again:\n%s\n%s", seed, planSummary(plan), planSummary(again))
				}
				break
			}
			if round > 5 {
				t.Fatalf("seed %d: warm-ups or lent standbys left after %d rounds", seed, round)
			}
			states = reported(plan, states)
		}
	}
}

// reported is what members report after running plan: every replica
// caught up with the best copy, actives and standbys as planned.
func reported(plan map[string]*memberPlan, states map[string]memberState) map[string]memberState {
	best := map[int32]int64{}
	for _, st := range states {
		for p, off := range st.Copies {
			best[p] = max(best[p], off)
		}
	}
	next := map[string]memberState{}
	for id, mp := range plan {
		st := memberState{Actives: mp.Actives, Standbys: mp.Standbys, Copies: map[int32]int64{}}
		for _, p := range slices.Concat(mp.Actives, mp.Standbys) {
			st.Copies[p] = best[p]
		}
		next[id] = st
	}
	return next
}

func TestUserDataRoundTrip(t *testing.T) {
	s := memberState{Addr: "10.0.0.7:8080", Shared: false, Actives: []int32{3, 1}, Standbys: []int32{9}, Copies: map[int32]int64{1: 77, 3: 1 << 40, 9: 0}, Inputs: []int32{0, 4}}
	got, err := decodeMemberState(s.encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("decode(encode(s)) = %+v, want %+v", got, s)
	}
	// A build before inputs were reported ends after the copies.
	noInputs := s
	noInputs.Inputs = nil
	b := noInputs.encode()
	if got, err := decodeMemberState(b[:len(b)-1]); err != nil || got.Inputs != nil || !reflect.DeepEqual(got.Actives, s.Actives) {
		t.Errorf("user data without inputs: got %+v, %v; want no inputs and the actives %v", got, err, s.Actives)
	}
	old, err := decodeMemberState([]byte("10.0.0.8:8080"))
	if err != nil || old.Addr != "10.0.0.8:8080" || len(old.Copies) != 0 {
		t.Errorf("older build's user data: got %+v, %v; want the bare address", old, err)
	}
	if _, err := decodeMemberState(s.encode()[:8]); err == nil {
		t.Error("truncated user data decoded without error")
	}
	mp := memberPlan{Standbys: []int32{2, 5}, Warmups: []int32{5}}
	sb, wu, err := decodeReplicas(mp.encode())
	if err != nil || !slices.Equal(sb, mp.Standbys) || !slices.Equal(wu, mp.Warmups) {
		t.Errorf("replicas round trip: got %v %v %v, want %v %v", sb, wu, err, mp.Standbys, mp.Warmups)
	}
	if _, _, err := decodeReplicas(nil); err == nil {
		t.Error("empty assignment user data decoded without error")
	}
}

func TestDeparted(t *testing.T) {
	tests := []struct {
		name               string
		states             map[string]memberState
		wantParts, wantIns []int32
	}{
		{"first generation: nobody ran anything", map[string]memberState{
			"a": {Inputs: []int32{}}, "b": {Inputs: []int32{}}}, nil, nil},
		{"everyone present", map[string]memberState{
			"a": {Actives: []int32{0, 1}, Inputs: []int32{0, 2}},
			"b": {Actives: []int32{2, 3}, Inputs: []int32{1, 3}}}, nil, nil},
		{"a member killed", map[string]memberState{
			"a": {Actives: []int32{0, 1}, Inputs: []int32{0, 2}}}, []int32{2, 3}, []int32{1, 3}},
		{"a killed member back with nothing", map[string]memberState{
			"a": {Actives: []int32{0, 1}, Inputs: []int32{0, 2}},
			"b": {Inputs: []int32{}}}, []int32{2, 3}, []int32{1, 3}},
		{"an older build reports no inputs", map[string]memberState{
			"a": {Actives: []int32{0, 1}}}, []int32{2, 3}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts, ins := departed(tt.states, 4, 4)
			if !slices.Equal(parts, tt.wantParts) || !slices.Equal(ins, tt.wantIns) {
				t.Errorf("departed = %v, %v; want %v, %v", parts, ins, tt.wantParts, tt.wantIns)
			}
		})
	}
}
