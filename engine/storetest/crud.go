package storetest

import (
	"errors"
	"math"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

func testRoundTrip(t *testing.T, open Opener) {
	s := fresh(t, open)
	cases := []struct {
		name string
		doc  engine.MovieStats
	}{
		{"plain", engine.MovieStats{MovieID: 362, Partition: 0, Count: 2, Sum: 18, Version: 7,
			Sources: map[int32]int64{0: 11}}},
		{"many sources", engine.MovieStats{MovieID: 1, Partition: 0, Count: 5, Sum: 31.25, Version: 1 << 40,
			Sources: map[int32]int64{0: 3, 1: 1 << 50, 2: 0, 17: 99}}},
		{"no sources", engine.MovieStats{MovieID: 2, Partition: 0, Count: 1, Sum: 0, Version: 0}},
		{"fractional sum", engine.MovieStats{MovieID: 3, Partition: 0, Count: 3, Sum: 0.1 + 0.2 + 7.7, Version: 5,
			Sources: map[int32]int64{3: 4}}},
		{"negative id and sum", engine.MovieStats{MovieID: -42, Partition: 0, Count: 4, Sum: -3.5, Version: 9,
			Sources: map[int32]int64{0: 1}}},
		{"max id", engine.MovieStats{MovieID: math.MaxInt64, Partition: 0, Count: math.MaxInt32 + 1, Sum: 1e12,
			Version: math.MaxInt64 - 1, Sources: map[int32]int64{math.MaxInt32: math.MaxInt64}}},
		{"min id", engine.MovieStats{MovieID: math.MinInt64, Partition: 0, Count: 1, Sum: 10, Version: 1,
			Sources: map[int32]int64{0: 1}}},
		{"zero id", engine.MovieStats{MovieID: 0, Partition: 0, Count: 7, Sum: 1.0 / 3, Version: 2,
			Sources: map[int32]int64{1: 2}}},
	}
	var docs []engine.MovieStats
	for _, tc := range cases {
		docs = append(docs, tc.doc)
	}
	mustApply(t, s, 0, 100, docs...)
	wantCheckpoint(t, s, 0, 100, true)

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantDoc(t, s, tc.doc) })
	}

	t.Run("Load", func(t *testing.T) {
		ids := []int64{99999}
		for _, d := range docs {
			ids = append(ids, d.MovieID)
		}
		got, err := s.Load(ctx(t), ids)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if len(got) != len(docs) {
			t.Fatalf("Load returned %d docs; want %d (missing id must be absent)", len(got), len(docs))
		}
		for _, want := range docs {
			if g, ok := got[want.MovieID]; !ok || !sameStats(g, want) {
				t.Errorf("Load[%d] = %s, %v; want %s", want.MovieID, show(g), ok, show(want))
			}
		}
	})

	t.Run("overwrite with newer version", func(t *testing.T) {
		upd := docs[0].Clone()
		upd.Count, upd.Sum, upd.Version = 3, 25, docs[0].Version+1
		upd.Sources[5] = 6
		mustApply(t, s, 0, 101, upd)
		wantDoc(t, s, upd)
		wantCheckpoint(t, s, 0, 101, true)
	})
}

func testLoadMissing(t *testing.T, open Opener) {
	s := fresh(t, open)
	for _, ids := range [][]int64{nil, {}, {1}, {1, 2, 3, -4}} {
		got, err := s.Load(ctx(t), ids)
		if err != nil {
			t.Fatalf("Load(%v) on empty store: %v", ids, err)
		}
		if len(got) != 0 {
			t.Fatalf("Load(%v) on empty store = %v; want empty", ids, got)
		}
	}
	mustApply(t, s, 0, 1, doc(1, 0, 1, 5, 1))
	got, err := s.Load(ctx(t), []int64{2, 1, 3})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(got) != 1 || got[1].Count != 1 {
		t.Fatalf("Load([2 1 3]) = %v; want only movie 1", got)
	}
}

func testGetMissing(t *testing.T, open Opener) {
	s := fresh(t, open)
	wantAbsent(t, s, 1)
	mustApply(t, s, 0, 1, doc(1, 0, 1, 5, 1))
	for _, id := range []int64{0, 2, -1, math.MaxInt64} {
		wantAbsent(t, s, id)
	}
}

func testCheckpointMissing(t *testing.T, open Opener) {
	s := fresh(t, open)
	wantCheckpoint(t, s, 0, 0, false)
	wantCheckpoint(t, s, 7, 0, false)

	// A batch without documents still moves the checkpoint.
	mustApply(t, s, 3, 42)
	wantCheckpoint(t, s, 3, 42, true)
	wantCheckpoint(t, s, 0, 0, false)

	// Checkpoint zero is a real checkpoint, distinct from none.
	mustApply(t, s, 4, 0)
	wantCheckpoint(t, s, 4, 0, true)
}

func testDropPartition(t *testing.T, open Opener) {
	s := fresh(t, open)
	p0 := []engine.MovieStats{doc(1, 0, 2, 10, 5), doc(2, 0, 1, 9, 6), doc(3, 0, 4, 4, 7)}
	p1 := []engine.MovieStats{doc(10, 1, 2, 10, 5), doc(11, 1, 1, 9, 6)}
	mustApply(t, s, 0, 8, p0...)
	mustApply(t, s, 1, 7, p1...)
	before := claim(t, s, 0)

	if err := s.DropPartition(ctx(t), 0); err != nil {
		t.Fatalf("DropPartition(0): %v", err)
	}
	for _, d := range p0 {
		wantAbsent(t, s, d.MovieID)
	}
	for _, d := range p1 {
		wantDoc(t, s, d)
	}
	wantCheckpoint(t, s, 0, 0, false)
	wantCheckpoint(t, s, 1, 7, true)

	page, err := s.Range(ctx(t), all(100))
	if err != nil {
		t.Fatalf("Range: %v", err)
	}
	if got := showIDs(page.Movies); len(got) != 2 || got[0] != 11 || got[1] != 10 {
		t.Fatalf("Range after drop = %v; want [11 10] (avg 9, then avg 5)", got)
	}
	loaded, err := s.Load(ctx(t), []int64{1, 2, 3, 10})
	if err != nil || len(loaded) != 1 {
		t.Fatalf("Load after drop = %v, %v; want only movie 10", loaded, err)
	}

	// Claims keep increasing across a drop, so an old owner stays fenced.
	if after := claim(t, s, 0); after <= before {
		t.Fatalf("Claim after drop = %d; want > %d", after, before)
	}
	if err := s.Apply(ctx(t), engine.Batch{Partition: 0, Epoch: before, Checkpoint: 9,
		Docs: []engine.MovieStats{doc(4, 0, 1, 1, 1)}}); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("Apply with the epoch claimed before the drop = %v; want ErrFenced", err)
	}
	wantAbsent(t, s, 4)

	// The next owner restores from the start of the changelog: lower
	// versions than the dropped documents must be accepted again.
	restored := doc(1, 0, 1, 3, 1)
	mustApply(t, s, 0, 2, restored)
	wantDoc(t, s, restored)
	wantCheckpoint(t, s, 0, 2, true)

	// Dropping an empty or unknown partition is not an error.
	if err := s.DropPartition(ctx(t), 9); err != nil {
		t.Fatalf("DropPartition(9) of an empty partition: %v", err)
	}
	wantCheckpoint(t, s, 1, 7, true)
}
