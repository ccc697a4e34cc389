package docstore

import (
	"context"
	"errors"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/storetest"
)

// openTemp opens a store in a fresh temporary directory. It waits for the
// background fill of the write cache (warm), which has nothing to read in
// a new store, so that a test inspecting the cache does not race it.
func openTemp(t testing.TB, opts ...Option) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	<-s.Warmed()
	return s
}

// openClaimed is openTemp with partition 0 claimed; it returns the epoch.
func openClaimed(t testing.TB, opts ...Option) (*Store, int64) {
	t.Helper()
	s := openTemp(t, opts...)
	epoch, err := s.Claim(context.Background(), 0)
	if err != nil {
		s.Close()
		t.Fatalf("Claim: %v", err)
	}
	return s, epoch
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) engine.Store { return openTemp(t, WithFsync(false)) })
}

func TestConformanceFsync(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	storetest.Run(t, func(t *testing.T) engine.Store { return openTemp(t) })
}

func TestBatchWithRepeatedMovie(t *testing.T) {
	m := func(id, version int64, count int64) engine.MovieStats {
		return engine.MovieStats{MovieID: id, Partition: 0, Count: count, Sum: float64(count) * 2, Version: version}
	}
	cases := []struct {
		name      string
		existing  []engine.MovieStats
		docs      []engine.MovieStats
		replay    bool
		wantErr   error
		wantCount int64 // of movie 1; 0 = absent
	}{
		{"new movie twice, in order", nil, []engine.MovieStats{m(1, 1, 1), m(1, 2, 2)}, false, nil, 2},
		{"new movie twice, stale second", nil, []engine.MovieStats{m(1, 2, 2), m(1, 1, 1)}, false, engine.ErrFenced, 0},
		{"new movie twice, stale second, replay", nil, []engine.MovieStats{m(1, 2, 2), m(1, 1, 1)}, true, nil, 2},
		{"existing movie twice, in order", []engine.MovieStats{m(1, 1, 1)}, []engine.MovieStats{m(1, 2, 2), m(1, 3, 3)}, false, nil, 3},
		{"existing movie twice, equal second", []engine.MovieStats{m(1, 1, 1)}, []engine.MovieStats{m(1, 2, 2), m(1, 2, 5)}, false, engine.ErrFenced, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openTemp(t, WithFsync(false))
			defer s.Close()
			ctx := t.Context()
			epoch, err := s.Claim(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.existing) > 0 {
				if err := s.Apply(ctx, engine.Batch{Epoch: epoch, Docs: tc.existing, Checkpoint: 1}); err != nil {
					t.Fatal(err)
				}
			}
			err = s.Apply(ctx, engine.Batch{Epoch: epoch, Docs: tc.docs, Checkpoint: 2, Replay: tc.replay})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Apply = %v; want %v", err, tc.wantErr)
			}
			got, err := s.Get(ctx, 1)
			switch {
			case tc.wantCount == 0 && !errors.Is(err, engine.ErrNotFound):
				t.Fatalf("Get = %+v, %v; want ErrNotFound", got, err)
			case tc.wantCount != 0 && (err != nil || got.Count != tc.wantCount):
				t.Fatalf("Get = %+v, %v; want count %d", got, err, tc.wantCount)
			}
			if err := checkIndexAgrees(s); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMovieChangesPartition(t *testing.T) {
	s := openTemp(t, WithFsync(false))
	defer s.Close()
	ctx := t.Context()
	mv := func(p int32, version int64) engine.MovieStats {
		return engine.MovieStats{MovieID: 7, Partition: p, Count: version, Sum: 3 * float64(version), Version: version}
	}
	for _, p := range []int32{0, 1} {
		epoch, err := s.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ctx, engine.Batch{Partition: p, Epoch: epoch, Docs: []engine.MovieStats{mv(p, int64(p)+1)}, Checkpoint: 1}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(p int32) int {
		n := 0
		if err := s.ScanPartition(ctx, p, func(engine.MovieStats) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if c0, c1 := count(0), count(1); c0 != 0 || c1 != 1 {
		t.Fatalf("after the move: partition 0 has %d movies, partition 1 has %d; want 0 and 1", c0, c1)
	}
	if err := s.DropPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, 7); err != nil {
		t.Fatalf("dropping the old partition removed the moved movie: %v", err)
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
	if err := s.DropPartition(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, 7); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Get after dropping its partition = %v; want ErrNotFound", err)
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
}
