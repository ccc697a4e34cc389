package main

import (
	"slices"
	"testing"
)

func TestRoundOrder(t *testing.T) {
	systems := []string{"a", "b", "c"}
	tests := []struct {
		round int
		want  []string
	}{
		{1, []string{"a", "b", "c"}},
		{2, []string{"b", "c", "a"}},
		{3, []string{"c", "a", "b"}},
		{4, []string{"a", "b", "c"}},
	}
	for _, tc := range tests {
		if got := roundOrder(systems, tc.round); !slices.Equal(got, tc.want) {
			t.Errorf("roundOrder(%v, %d) = %v, want %v", systems, tc.round, got, tc.want)
		}
	}
	if !slices.Equal(systems, []string{"a", "b", "c"}) {
		t.Errorf("roundOrder changed its argument: %v", systems)
	}
}
