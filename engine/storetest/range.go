package storetest

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// seeded opens a store holding n range-test documents and returns their model.
func seeded(t *testing.T, open Opener, n int) (engine.Store, model) {
	t.Helper()
	s := fresh(t, open)
	docs := rangeData(uint64(n), n, 0)
	mustApply(t, s, 0, int64(n), docs...)
	return s, modelOf(docs)
}

// wantPage compares one page with the model's first q.Limit answers.
func wantPage(t *testing.T, s engine.Store, md model, q engine.RangeQuery) engine.Page {
	t.Helper()
	page, err := s.Range(ctx(t), q)
	if err != nil {
		t.Fatalf("Range(%+v): %v", q, err)
	}
	want := md.query(q)
	if len(want) > q.Limit {
		want = want[:q.Limit]
	}
	if len(page.Movies) != len(want) {
		t.Fatalf("Range(min %v max %v limit %d after %v) returned %v; want %v",
			q.MinAvg, q.MaxAvg, q.Limit, q.After, showIDs(page.Movies), showIDs(want))
	}
	for i := range want {
		if !sameStats(page.Movies[i], want[i]) {
			t.Fatalf("Range(min %v max %v limit %d after %v)[%d] = %s; want %s (all: %v vs %v)",
				q.MinAvg, q.MaxAvg, q.Limit, q.After, i, show(page.Movies[i]), show(want[i]),
				showIDs(page.Movies), showIDs(want))
		}
	}
	if len(page.Movies) < q.Limit && page.Next != nil {
		t.Fatalf("Range returned a short page (%d < limit %d) with Next %+v; want nil", len(page.Movies), q.Limit, *page.Next)
	}
	if page.Next != nil {
		if last := cursorOf(page.Movies[len(page.Movies)-1]); *page.Next != last {
			t.Fatalf("Next = %+v; want the last movie's cursor %+v", *page.Next, last)
		}
	}
	return page
}

func testRangeOrder(t *testing.T, open Opener) {
	s, md := seeded(t, open, 80)
	wantPage(t, s, md, all(1000))
}

func testRangeBounds(t *testing.T, open Opener) {
	s, md := seeded(t, open, 80)
	inf := math.Inf(1)
	cases := []struct {
		name     string
		min, max float64
	}{
		{"everything", math.Inf(-1), inf},
		{"min equals a stored average", 7.5, inf},
		{"min between averages", 7.6, inf},
		{"min zero", 0, inf},
		{"max equals a stored average", math.Inf(-1), 5},
		{"min and max equal", 2.5, 2.5},
		{"closed range", 2.5, 8},
		{"one third exactly", 1.0 / 3, 1.0 / 3},
		{"above every average", 10.5, inf},
		{"top equals max", 10, 10},
		{"empty: min above max", 8, 5},
		{"negative bounds", -5, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			page := wantPage(t, s, md, engine.RangeQuery{MinAvg: tc.min, MaxAvg: tc.max, Limit: 1000})
			for _, m := range page.Movies {
				if a := m.Avg(); a < tc.min || a > tc.max {
					t.Fatalf("movie %d avg %v outside [%v, %v]", m.MovieID, a, tc.min, tc.max)
				}
			}
		})
	}
}

func testRangeLimit(t *testing.T, open Opener) {
	s, md := seeded(t, open, 80)
	for _, limit := range []int{1, 2, 5, 79, 80, 81} {
		page := wantPage(t, s, md, engine.RangeQuery{MinAvg: math.Inf(-1), MaxAvg: math.Inf(1), Limit: limit})
		if limit < 80 && page.Next == nil {
			t.Fatalf("limit %d of 80 matches: Next is nil; want a cursor", limit)
		}
		if limit > 80 && page.Next != nil {
			t.Fatalf("limit %d of 80 matches: Next = %+v; want nil", limit, *page.Next)
		}
	}
}

// pageAll follows Next until it is nil and returns every movie seen.
func pageAll(t *testing.T, s engine.Store, md model, q engine.RangeQuery) []engine.MovieStats {
	t.Helper()
	var got []engine.MovieStats
	for pages := 0; ; pages++ {
		if pages > len(md)+2 {
			t.Fatalf("paging with limit %d did not end after %d pages", q.Limit, pages)
		}
		page := wantPage(t, s, md, q)
		got = append(got, page.Movies...)
		if page.Next == nil {
			return got
		}
		if len(page.Movies) != q.Limit {
			t.Fatalf("page %d has %d movies and a Next cursor; want a full page of %d", pages, len(page.Movies), q.Limit)
		}
		next := *page.Next
		q.After = &next
	}
}

func testRangePaging(t *testing.T, open Opener) {
	s, md := seeded(t, open, 80)
	cases := []struct {
		name     string
		min, max float64
	}{
		{"all", math.Inf(-1), math.Inf(1)},
		{"min 5", 5, math.Inf(1)},
		{"2.5 to 8", 2.5, 8},
		{"ties only", 7.5, 7.5},
	}
	for _, tc := range cases {
		for _, limit := range []int{1, 2, 3, 7, 16} {
			t.Run(fmt.Sprintf("%s limit %d", tc.name, limit), func(t *testing.T) {
				q := engine.RangeQuery{MinAvg: tc.min, MaxAvg: tc.max, Limit: limit}
				got := pageAll(t, s, md, q)
				want := md.query(q)
				if len(got) != len(want) {
					t.Fatalf("limit %d: pages returned %d movies %v; want %d %v", limit, len(got), showIDs(got), len(want), showIDs(want))
				}
				seen := map[int64]bool{}
				for i := range want {
					if seen[got[i].MovieID] {
						t.Fatalf("limit %d: movie %d returned twice", limit, got[i].MovieID)
					}
					seen[got[i].MovieID] = true
					if got[i].MovieID != want[i].MovieID {
						t.Fatalf("limit %d: position %d = movie %d; want %d", limit, i, got[i].MovieID, want[i].MovieID)
					}
				}
			})
		}
	}
}

func testRangeAfterCursor(t *testing.T, open Opener) {
	s, md := seeded(t, open, 80)
	cursors := []engine.Cursor{
		{Avg: 7.5, MovieID: 0},             // inside a tie group, id maybe absent
		{Avg: 7.5, MovieID: math.MinInt64}, // before the whole tie group
		{Avg: 7.5, MovieID: math.MaxInt64}, // after the whole tie group
		{Avg: 6, MovieID: 3},               // between averages
		{Avg: 11, MovieID: 0},              // before everything
		{Avg: -1, MovieID: 0},              // after everything
		{Avg: 1.0 / 3, MovieID: -1},        // inside the one-third group
		{Avg: math.Inf(1), MovieID: math.MaxInt64},
	}
	for _, c := range cursors {
		after := c
		for _, q := range []engine.RangeQuery{
			{MinAvg: math.Inf(-1), MaxAvg: math.Inf(1), Limit: 5, After: &after},
			{MinAvg: 2.5, MaxAvg: 8, Limit: 1000, After: &after},
		} {
			wantPage(t, s, md, q)
		}
	}
}

func testRangeInvalid(t *testing.T, open Opener) {
	s, _ := seeded(t, open, 5)
	cases := []struct {
		name string
		q    engine.RangeQuery
	}{
		{"zero limit", engine.RangeQuery{MinAvg: 0, MaxAvg: 10, Limit: 0}},
		{"negative limit", engine.RangeQuery{MinAvg: 0, MaxAvg: 10, Limit: -1}},
		{"NaN min", engine.RangeQuery{MinAvg: math.NaN(), MaxAvg: 10, Limit: 5}},
		{"NaN max", engine.RangeQuery{MinAvg: 0, MaxAvg: math.NaN(), Limit: 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			page, err := s.Range(ctx(t), tc.q)
			if !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("Range(%+v) = %d movies, %v; want ErrInvalid", tc.q, len(page.Movies), err)
			}
		})
	}
}

func testRangeAvgMoves(t *testing.T, open Opener) {
	s := fresh(t, open)
	mustApply(t, s, 0, 1, doc(1, 0, 1, 9, 1), doc(2, 0, 1, 8.5, 1), doc(3, 0, 1, 2, 1))
	md := modelOf([]engine.MovieStats{doc(1, 0, 1, 9, 1), doc(2, 0, 1, 8.5, 1), doc(3, 0, 1, 2, 1)})
	moves := []engine.MovieStats{
		doc(1, 0, 2, 4, 2),    // 9 -> 2: leaves the top, ties with movie 3
		doc(3, 0, 2, 19, 2),   // 2 -> 9.5: becomes first
		doc(2, 0, 3, 25.5, 3), // 8.5 -> 8.5 with more ratings: same place, new count
	}
	for i, m := range moves {
		mustApply(t, s, 0, int64(2+i), m)
		md[m.MovieID] = m
		for _, q := range []engine.RangeQuery{
			all(10),
			{MinAvg: 8, MaxAvg: math.Inf(1), Limit: 10},
			{MinAvg: 1, MaxAvg: 3, Limit: 10},
			all(1),
		} {
			wantPage(t, s, md, q)
		}
		q := all(1)
		if got := pageAll(t, s, md, q); len(got) != 3 {
			t.Fatalf("after move %d paging returned %v; want each of 3 movies once", i, showIDs(got))
		}
	}
}
