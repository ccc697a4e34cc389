package storetest

import (
	"errors"
	"math"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

func testApplyInvalid(t *testing.T, open Opener) {
	cases := []struct {
		name string
		bad  engine.MovieStats
	}{
		{"NaN sum", engine.MovieStats{MovieID: 3, Partition: 0, Count: 1, Sum: math.NaN(), Version: 9}},
		{"infinite sum", engine.MovieStats{MovieID: 3, Partition: 0, Count: 1, Sum: math.Inf(1), Version: 9}},
		{"negative infinite sum", engine.MovieStats{MovieID: 3, Partition: 0, Count: 2, Sum: math.Inf(-1), Version: 9}},
		{"zero count", engine.MovieStats{MovieID: 3, Partition: 0, Count: 0, Sum: 0, Version: 9}},
		{"negative count", engine.MovieStats{MovieID: 3, Partition: 0, Count: -1, Sum: 5, Version: 9}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := fresh(t, open)
			a := doc(1, 0, 1, 5, 1)
			mustApply(t, s, 0, 5, a)

			newer := doc(1, 0, 2, 12, 2)
			other := doc(2, 0, 1, 7, 3)
			for _, order := range [][]engine.MovieStats{{other, newer, tc.bad}, {tc.bad, other, newer}} {
				err := s.Apply(ctx(t), engine.Batch{Partition: 0, Epoch: claim(t, s, 0), Docs: order, Checkpoint: 9})
				if !errors.Is(err, engine.ErrInvalid) {
					t.Fatalf("Apply with %s = %v; want ErrInvalid", tc.name, err)
				}
				wantCheckpoint(t, s, 0, 5, true)
				wantDoc(t, s, a)
				wantAbsent(t, s, other.MovieID)
				wantAbsent(t, s, tc.bad.MovieID)
			}
			// Nothing non-finite ever shows up in a query.
			page, err := s.Range(ctx(t), all(10))
			if err != nil {
				t.Fatalf("Range: %v", err)
			}
			if len(page.Movies) != 1 || !sameStats(page.Movies[0], a) {
				t.Fatalf("Range after refused batch = %v; want only movie 1", showIDs(page.Movies))
			}
		})
	}
}

func testVersionFencing(t *testing.T, open Opener) {
	cases := []struct {
		name  string
		stale int64 // version of the refused document; stored version is 5
	}{
		{"equal version", 5},
		{"older version", 4},
		{"much older version", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := fresh(t, open)
			a, b := doc(1, 0, 2, 10, 5), doc(2, 0, 3, 15, 5)
			mustApply(t, s, 0, 10, a, b)

			batch := engine.Batch{Partition: 0, Epoch: claim(t, s, 0), Checkpoint: 20, Docs: []engine.MovieStats{
				doc(3, 0, 1, 1, 1),        // new document
				doc(1, 0, 3, 20, 6),       // newer version of a
				doc(2, 0, 9, 9, tc.stale), // stale version of b
			}}
			if err := s.Apply(ctx(t), batch); !errors.Is(err, engine.ErrFenced) {
				t.Fatalf("Apply with a stale document = %v; want ErrFenced", err)
			}
			wantDoc(t, s, a)
			wantDoc(t, s, b)
			wantAbsent(t, s, 3)
			wantCheckpoint(t, s, 0, 10, true)

			// The same store still accepts a valid batch afterwards.
			newer := doc(2, 0, 4, 20, 6)
			mustApply(t, s, 0, 21, newer)
			wantDoc(t, s, newer)
		})
	}
}

func testReplaySkipsStale(t *testing.T, open Opener) {
	s := fresh(t, open)
	a, b := doc(1, 0, 2, 10, 5), doc(2, 0, 3, 15, 5)
	mustApply(t, s, 0, 10, a, b)

	staleA := doc(1, 0, 1, 1, 4)  // older: skipped
	equalB := doc(2, 0, 7, 7, 5)  // equal: skipped
	c := doc(3, 0, 1, 9, 6)       // new: written
	laterA := doc(1, 0, 4, 30, 8) // newer than stored: written, even after a stale one of the same movie
	batch := engine.Batch{Partition: 0, Epoch: claim(t, s, 0), Checkpoint: 20, Replay: true,
		Docs: []engine.MovieStats{staleA, equalB, c}}
	if err := s.Apply(ctx(t), batch); err != nil {
		t.Fatalf("replay Apply: %v", err)
	}
	wantDoc(t, s, a)
	wantDoc(t, s, b)
	wantDoc(t, s, c)
	wantCheckpoint(t, s, 0, 20, true)

	batch = engine.Batch{Partition: 0, Epoch: claim(t, s, 0), Checkpoint: 21, Replay: true,
		Docs: []engine.MovieStats{laterA, doc(2, 0, 1, 1, 1)}}
	if err := s.Apply(ctx(t), batch); err != nil {
		t.Fatalf("replay Apply: %v", err)
	}
	wantDoc(t, s, laterA)
	wantDoc(t, s, b)
	wantCheckpoint(t, s, 0, 21, true)

	// A replay batch is still fenced by epochs.
	old := claim(t, s, 0)
	claim(t, s, 0)
	batch = engine.Batch{Partition: 0, Epoch: old, Checkpoint: 30, Replay: true,
		Docs: []engine.MovieStats{doc(4, 0, 1, 1, 1)}}
	if err := s.Apply(ctx(t), batch); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("replay Apply with an old epoch = %v; want ErrFenced", err)
	}
	wantAbsent(t, s, 4)
	wantCheckpoint(t, s, 0, 21, true)
}

func testEpochFencing(t *testing.T, open Opener) {
	s := fresh(t, open)
	var prev int64
	for i := range 10 {
		e := claim(t, s, 0)
		if i > 0 && e <= prev {
			t.Fatalf("claim %d of partition 0 = %d; want > %d", i, e, prev)
		}
		prev = e
	}

	old := prev
	current := claim(t, s, 0)
	refused := engine.Batch{Partition: 0, Epoch: old, Checkpoint: 5, Docs: []engine.MovieStats{doc(1, 0, 1, 5, 1)}}
	if err := s.Apply(ctx(t), refused); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("Apply with epoch %d after claim %d = %v; want ErrFenced", old, current, err)
	}
	wantAbsent(t, s, 1)
	wantCheckpoint(t, s, 0, 0, false)

	ok := engine.Batch{Partition: 0, Epoch: current, Checkpoint: 6, Docs: []engine.MovieStats{doc(1, 0, 1, 5, 1)}}
	if err := s.Apply(ctx(t), ok); err != nil {
		t.Fatalf("Apply with the current epoch: %v", err)
	}
	wantCheckpoint(t, s, 0, 6, true)

	t.Run("an epoch the store never handed out is fenced", func(t *testing.T) {
		// A store that lost its state since the claim (Redis restarted
		// empty) must not accept the writer's batches: its epoch is newer
		// than the store's, or the partition has no claim at all.
		future := engine.Batch{Partition: 0, Epoch: current + 1, Checkpoint: 7, Docs: []engine.MovieStats{doc(4, 0, 1, 5, 1)}}
		if err := s.Apply(ctx(t), future); !errors.Is(err, engine.ErrFenced) {
			t.Fatalf("Apply with unclaimed epoch %d (current %d) = %v; want ErrFenced", current+1, current, err)
		}
		unclaimed := engine.Batch{Partition: 7, Epoch: 1, Checkpoint: 7, Docs: []engine.MovieStats{doc(5, 7, 1, 5, 1)}}
		if err := s.Apply(ctx(t), unclaimed); !errors.Is(err, engine.ErrFenced) {
			t.Fatalf("Apply to never-claimed partition 7 = %v; want ErrFenced", err)
		}
		wantAbsent(t, s, 4)
		wantAbsent(t, s, 5)
		wantCheckpoint(t, s, 0, 6, true)
		wantCheckpoint(t, s, 7, 0, false)
	})

	t.Run("partitions are independent", func(t *testing.T) {
		e1 := claim(t, s, 1)
		for range 5 {
			claim(t, s, 0)
		}
		b := engine.Batch{Partition: 1, Epoch: e1, Checkpoint: 3, Docs: []engine.MovieStats{doc(2, 1, 1, 5, 1)}}
		if err := s.Apply(ctx(t), b); err != nil {
			t.Fatalf("Apply to partition 1 after claims of partition 0: %v", err)
		}
		wantCheckpoint(t, s, 1, 3, true)
		e2 := claim(t, s, 1)
		if e2 <= e1 {
			t.Fatalf("second claim of partition 1 = %d; want > %d", e2, e1)
		}
		b = engine.Batch{Partition: 1, Epoch: e1, Checkpoint: 4, Docs: []engine.MovieStats{doc(3, 1, 1, 5, 1)}}
		if err := s.Apply(ctx(t), b); !errors.Is(err, engine.ErrFenced) {
			t.Fatalf("Apply to partition 1 with an old epoch = %v; want ErrFenced", err)
		}
		wantAbsent(t, s, 3)
		wantCheckpoint(t, s, 1, 3, true)
		wantCheckpoint(t, s, 0, 6, true)
	})
}
