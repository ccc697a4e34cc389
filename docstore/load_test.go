package docstore

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// BenchmarkLoad reads batches of 500 random movies out of 62k, as the
// aggregate stage does for documents its cache dropped: point reads, one
// per key, against one iterator seeking the sorted keys.
func BenchmarkLoad(b *testing.B) {
	const movies, batch = 62000, 500
	ctx := context.Background()
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := restore(ctx, s, movies); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]int64, batch)
	for _, tc := range []struct {
		name string
		load func(r kvReader, ids []int64, out map[int64]engine.MovieStats) error
	}{
		{"point", s.loadPoints},
		{"sorted", s.loadSorted},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				for i := range ids {
					ids[i] = 1 + rng.Int64N(movies)
				}
				out := make(map[int64]engine.MovieStats, batch)
				err := s.read(ctx, func(r kvReader) error { return tc.load(r, ids, out) })
				if err != nil || len(out) == 0 {
					b.Fatalf("load: %d found, %v", len(out), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/doc")
		})
	}
}

// TestLoadSortedMatchesPointReads checks the iterator path of Load against
// point reads: ids out of order, repeated, and missing.
func TestLoadSortedMatchesPointReads(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := restore(ctx, s, 3000); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{seekLoadMin - 1, seekLoadMin, 100, 1000} {
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = rng.Int64N(3500) - 100 // some below 1 and above 3000: missing
		}
		ids[n-1] = ids[0] // one repeated
		got, err := s.Load(ctx, ids)
		if err != nil {
			t.Fatalf("Load(%d ids): %v", n, err)
		}
		want := map[int64]engine.MovieStats{}
		err = s.read(ctx, func(r kvReader) error { return s.loadPoints(r, ids, want) })
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("Load(%d ids) found %d documents, point reads %d", n, len(got), len(want))
		}
		for id, w := range want {
			g, ok := got[id]
			if !ok || g.Count != w.Count || g.Sum != w.Sum || g.Version != w.Version || g.Partition != w.Partition || len(g.Sources) != len(w.Sources) {
				t.Errorf("Load(%d ids)[%d] = %+v (found %v), want %+v", n, id, g, ok, w)
			}
		}
	}
}
