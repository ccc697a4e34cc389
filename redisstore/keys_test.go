package redisstore

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// byRangeOrder is the contract's order: average descending, then id ascending.
func byRangeOrder(a, b engine.Cursor) int {
	switch {
	case a.Before(b):
		return -1
	case b.Before(a):
		return 1
	}
	return 0
}

func TestRankOrderIsAvgDescThenIDAsc(t *testing.T) {
	avgs := []float64{math.Inf(1), math.MaxFloat64, 10, 9.5, 8.000000000000002, 8, 7.999999999999999,
		1, math.SmallestNonzeroFloat64, 0, math.Copysign(0, -1), -math.SmallestNonzeroFloat64, -1, -3.5,
		-math.MaxFloat64, math.Inf(-1)}
	ids := []int64{math.MinInt64, math.MinInt64 + 1, -1 << 40, -2, -1, 0, 1, 2, 9, 10, 255, 256, 1 << 40, math.MaxInt64 - 1, math.MaxInt64}
	rng := rand.New(rand.NewPCG(1, 2))
	var cursors []engine.Cursor
	for _, a := range avgs {
		for _, id := range ids {
			cursors = append(cursors, engine.Cursor{Avg: a, MovieID: id})
		}
	}
	for range 2000 {
		cursors = append(cursors, engine.Cursor{Avg: rng.Float64()*20 - 10, MovieID: rng.Int64() - rng.Int64()})
	}
	rng.Shuffle(len(cursors), func(i, j int) { cursors[i], cursors[j] = cursors[j], cursors[i] })

	want := slices.Clone(cursors)
	slices.SortStableFunc(want, byRangeOrder)
	got := slices.Clone(cursors)
	slices.SortStableFunc(got, func(a, b engine.Cursor) int {
		return strings.Compare(rank(a.Avg, a.MovieID), rank(b.Avg, b.MovieID))
	})
	for i := range want {
		if byRangeOrder(got[i], want[i]) != 0 {
			t.Fatalf("position %d: rank order gives %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestRankEndsWithDecimalID(t *testing.T) {
	// The range script finds the movie's key from the text after the
	// fixed-width part of the rank.
	for _, id := range []int64{math.MinInt64, -362, 0, 362, math.MaxInt64} {
		r := rank(7.25, id)
		if len(r) <= rankPrefixLen || r[rankPrefixLen] != ':' {
			t.Fatalf("rank(7.25, %d) = %q: want %d fixed-width characters then ':'", id, r, rankPrefixLen)
		}
		if got := r[rankPrefixLen+1:]; got != strconv.FormatInt(id, 10) {
			t.Errorf("rank(7.25, %d) ends with %q; want the decimal id", id, got)
		}
	}
}

// inLex reports whether member lies within the ZRANGEBYLEX bounds from, to.
func inLex(member, from, to string) bool {
	lower := strings.Compare(member, from[1:])
	if from[0] == '[' && lower < 0 || from[0] == '(' && lower <= 0 {
		return false
	}
	upper := strings.Compare(member, to[1:])
	return to[0] == '[' && upper <= 0 || to[0] == '(' && upper < 0
}

func TestLexBounds(t *testing.T) {
	members := []engine.Cursor{{Avg: 9, MovieID: 1}, {Avg: 8, MovieID: -5}, {Avg: 8, MovieID: 3},
		{Avg: 8, MovieID: 1 << 50}, {Avg: 7.5, MovieID: 2}, {Avg: 7, MovieID: 0}}
	tests := []struct {
		name     string
		min, max float64
		after    *engine.Cursor
	}{
		{"inclusive both ends", 7.5, 8, nil},
		{"single value", 8, 8, nil},
		{"everything", math.Inf(-1), math.Inf(1), nil},
		{"empty", 8.5, 8.9, nil},
		{"after a tie", 7, 9, &engine.Cursor{Avg: 8, MovieID: -5}},
		{"after an absent id inside a tie", 7, 9, &engine.Cursor{Avg: 8, MovieID: 0}},
		{"after an absent average", 7, 9, &engine.Cursor{Avg: 7.75, MovieID: 100}},
		{"cursor above the range", 7, 8, &engine.Cursor{Avg: 9, MovieID: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			from, to := lexFrom(tc.max), lexTo(tc.min)
			if tc.after != nil && !(tc.after.Avg > tc.max) {
				from = lexAfter(tc.after.Avg, tc.after.MovieID)
			}
			for _, m := range members {
				want := m.Avg >= tc.min && m.Avg <= tc.max && (tc.after == nil || tc.after.Before(m))
				if got := inLex(rank(m.Avg, m.MovieID), from, to); got != want {
					t.Errorf("movie %+v in [%s, %s]: got %v, want %v", m, from, to, got, want)
				}
			}
		})
	}
}

func TestSourcesRoundTrip(t *testing.T) {
	tests := []map[int32]int64{nil, {0: 0}, {3: 1, 0: 7, math.MaxInt32: math.MaxInt64, -1: -1}}
	for _, src := range tests {
		enc := encodeSources(src)
		got, err := decodeSources(enc)
		if err != nil {
			t.Fatalf("decodeSources(%q): %v", enc, err)
		}
		if len(got) != len(src) {
			t.Fatalf("round trip of %v = %v", src, got)
		}
		for k, v := range src {
			if got[k] != v {
				t.Fatalf("round trip of %v = %v", src, got)
			}
		}
	}
	if got := encodeSources(map[int32]int64{2: 5, 0: 1, 1: 3}); got != "0:1,1:3,2:5" {
		t.Errorf("encodeSources = %q, want sorted 0:1,1:3,2:5", got)
	}
	for _, bad := range []string{"1", "a:1", "1:b", "1:2,", "99999999999:1"} {
		if _, err := decodeSources(bad); err == nil {
			t.Errorf("decodeSources(%q): got nil error", bad)
		}
	}
}

func TestPatternEscapesGlob(t *testing.T) {
	if got, want := (keys{prefix: `a*b?[c]\`}).pattern(), `a\*b\?\[c\]\\*`; got != want {
		t.Errorf("pattern() = %q, want %q", got, want)
	}
}
