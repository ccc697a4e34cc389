package engine

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestPlanInputsSticky: input partitions are spread evenly and stay with
// the member that read them when members join or leave.
func TestPlanInputsSticky(t *testing.T) {
	in := func(ps ...int32) memberState { return memberState{Inputs: ps} }
	for _, tc := range []struct {
		name   string
		ids    []string
		states map[string]memberState
		n      int32
		want   map[string][]int32
	}{
		{"no history: in turn", []string{"c", "a", "b"}, nil, 7,
			map[string][]int32{"a": {0, 1, 2}, "b": {3, 4}, "c": {5, 6}}},
		{"a member joins: three move to it", []string{"a", "b", "c", "d"},
			map[string]memberState{"a": in(ps(0, 4)...), "b": in(ps(4, 8)...), "c": in(ps(8, 12)...)}, 12,
			map[string][]int32{"a": {0, 1, 2}, "b": {4, 5, 6}, "c": {8, 9, 10}, "d": {3, 7, 11}}},
		{"a member leaves: only its partitions move", []string{"a", "b", "c"},
			map[string]memberState{"a": in(0, 1, 2), "b": in(4, 5, 6), "c": in(8, 9, 10)}, 12,
			map[string][]int32{"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}, "c": {8, 9, 10, 11}}},
		{"the member holding more gets the larger quota", []string{"a", "b"},
			map[string]memberState{"a": in(0), "b": in(1, 2, 3, 4)}, 5,
			map[string][]int32{"a": {0, 4}, "b": {1, 2, 3}}},
		{"claimed twice or out of range: first by id, ignored", []string{"a", "b"},
			map[string]memberState{"a": in(0, 9), "b": in(0, 1)}, 4,
			map[string][]int32{"a": {0, 2}, "b": {1, 3}}},
		{"fewer partitions than members", []string{"a", "b", "c"},
			map[string]memberState{"c": in(0)}, 2,
			map[string][]int32{"a": {1}, "c": {0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := planInputs(tc.ids, tc.states, tc.n); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("planInputs: got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPlanInputsBalancedAndComplete: for random histories, every input
// partition goes to exactly one member, the counts differ by at most
// one, and the plan does not depend on the order of the member ids.
func TestPlanInputsBalancedAndComplete(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 500 {
		n := int32(r.IntN(20) + 1)
		var ids []string
		states := map[string]memberState{}
		for i := range r.IntN(6) + 1 {
			id := fmt.Sprintf("m%d", i)
			ids = append(ids, id)
			var held []int32
			for p := range n + 2 {
				if r.IntN(3) == 0 {
					held = append(held, p)
				}
			}
			states[id] = memberState{Inputs: held}
		}
		got := planInputs(ids, states, n)
		seen := map[int32]string{}
		lo, hi := int(n), 0
		for _, id := range ids {
			for _, p := range got[id] {
				if other, dup := seen[p]; dup {
					t.Fatalf("round %d: partition %d planned for %s and %s", round, p, other, id)
				}
				seen[p] = id
			}
			lo, hi = min(lo, len(got[id])), max(hi, len(got[id]))
		}
		if len(seen) != int(n) || hi-lo > 1 {
			t.Fatalf("round %d: %d of %d partitions planned, counts %d..%d: %v", round, len(seen), n, lo, hi, got)
		}
		rev := slices.Clone(ids)
		slices.Reverse(rev)
		if again := planInputs(rev, states, n); !reflect.DeepEqual(again, got) {
			t.Fatalf("round %d: plan depends on the order of ids: %v, then %v", round, got, again)
		}
	}
}
