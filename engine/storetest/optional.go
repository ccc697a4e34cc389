package storetest

import (
	"errors"
	"math"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

func testPartitionScanner(t *testing.T, open Opener) {
	s := fresh(t, open)
	sc, ok := s.(engine.PartitionScanner)
	if !ok {
		t.Skip("store does not implement engine.PartitionScanner")
	}
	p0 := rangeData(1, 40, 0)
	p1 := rangeData(2, 30, 1)
	for i := range p1 {
		p1[i].MovieID += 1_000_000 // disjoint from p0
	}
	mustApply(t, s, 0, 1, p0...)
	mustApply(t, s, 1, 1, p1...)

	for _, tc := range []struct {
		p    int32
		want []engine.MovieStats
	}{{0, p0}, {1, p1}, {2, nil}} {
		seen := map[int64]engine.MovieStats{}
		err := sc.ScanPartition(ctx(t), tc.p, func(m engine.MovieStats) error {
			if _, dup := seen[m.MovieID]; dup {
				return errors.New("movie seen twice")
			}
			seen[m.MovieID] = m
			return nil
		})
		if err != nil {
			t.Fatalf("ScanPartition(%d): %v", tc.p, err)
		}
		if len(seen) != len(tc.want) {
			t.Fatalf("ScanPartition(%d) visited %d documents; want %d", tc.p, len(seen), len(tc.want))
		}
		for _, w := range tc.want {
			if g, ok := seen[w.MovieID]; !ok || !sameStats(g, w) {
				t.Fatalf("ScanPartition(%d) movie %d = %s (seen %v); want %s", tc.p, w.MovieID, show(g), ok, show(w))
			}
		}
	}

	stop := errors.New("stop here")
	calls := 0
	err := sc.ScanPartition(ctx(t), 0, func(engine.MovieStats) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 3 {
		t.Fatalf("ScanPartition with a failing callback = %v after %d calls; want the callback's error after 3", err, calls)
	}
}

func testResetter(t *testing.T, open Opener) {
	s := fresh(t, open)
	r, ok := s.(engine.Resetter)
	if !ok {
		t.Skip("store does not implement engine.Resetter")
	}
	docs := rangeData(3, 20, 0)
	mustApply(t, s, 0, 5, docs...)
	mustApply(t, s, 1, 6, doc(5_000_000, 1, 1, 1, 1))
	before, err := s.Claim(ctx(t), 0)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	// A store that also holds tables keeps them: each table resets on its
	// own (engine.TableResetter), so resetting one job spares the others.
	var tb engine.Table
	var kept engine.Doc
	if ts, ok := s.(engine.Tables); ok {
		sh := shapes()[1]
		tb = mustOpen(t, ts, sh.spec)
		kept = tdoc(sh, 1, 0, 1, 10, "gold")
		tapply(t, tb, 0, 1, kept)
	}

	if err := r.Reset(ctx(t)); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if tb != nil {
		wantTDoc(t, tb, kept)
		wantTCheckpoint(t, tb, 0, 1, true)
	}
	// Epochs survive a reset: a writer still holding an old epoch (a
	// zombie of the reset application) stays fenced.
	if after, err := s.Claim(ctx(t), 0); err != nil || after <= before {
		t.Fatalf("Claim after Reset = %d, %v; want an epoch above %d", after, err, before)
	}
	for _, d := range docs {
		wantAbsent(t, s, d.MovieID)
	}
	wantAbsent(t, s, 5_000_000)
	wantCheckpoint(t, s, 0, 0, false)
	wantCheckpoint(t, s, 1, 0, false)
	page, err := s.Range(ctx(t), all(100))
	if err != nil || len(page.Movies) != 0 || page.Next != nil {
		t.Fatalf("Range after Reset = %v, %v; want an empty last page", showIDs(page.Movies), err)
	}

	// The store is usable after a reset, and old versions are accepted again.
	again := doc(docs[0].MovieID, 0, 1, 3, 1)
	mustApply(t, s, 0, 1, again)
	wantDoc(t, s, again)
	wantCheckpoint(t, s, 0, 1, true)
	page, err = s.Range(ctx(t), engine.RangeQuery{MinAvg: 0, MaxAvg: math.Inf(1), Limit: 10})
	if err != nil || len(page.Movies) != 1 {
		t.Fatalf("Range after Reset and one write = %v, %v; want one movie", showIDs(page.Movies), err)
	}
}
