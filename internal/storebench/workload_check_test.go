package storebench

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/boltstore"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/redisstore"
)

// TestMovieAveragesTieOnTheGrid checks that the synthetic movies' averages
// are exactly k/20 (so movies with the same grid point tie) and spread over
// the whole grid.
func TestMovieAveragesTieOnTheGrid(t *testing.T) {
	points := map[float64]int{}
	for id := int64(1); id <= 20_000; id++ {
		m := movie(id, 1+id%5)
		avg := m.Avg()
		k := math.Round(avg * 20)
		if avg != k/20 || k < 0 || k > 200 {
			t.Fatalf("movie %d: avg %v (sum %v / count %d), want exactly k/20 for k in 0..200", id, avg, m.Sum, m.Count)
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("movie %d: %v", id, err)
		}
		points[avg]++
	}
	if got, want := len(points), 201; got != want {
		t.Errorf("distinct averages = %d, want %d", got, want)
	}
}

// TestPickers checks the batch ids: distinct, all in the batch's partition,
// and (for the Zipf picker) concentrated on the popular low ids, with more
// ratings than documents.
func TestPickers(t *testing.T) {
	const n, size = 1_000_000, 1000
	for _, tc := range []struct {
		name              string
		picker            func(int, *rand.Rand) *picker
		medianMin, medMax int64
		minRatingsPerDoc  float64
	}{
		{"uniform", uniformPicker, n / 4, 3 * n / 4, 1},
		{"zipf", zipfPicker, 1, n / 20, 1.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pk := tc.picker(n, rand.New(rand.NewPCG(1, 2)))
			for p := range int32(partitions) {
				ids, draws, err := pk.ids(p, size)
				if err != nil {
					t.Fatal(err)
				}
				if len(ids) != size {
					t.Fatalf("partition %d: %d ids, want %d", p, len(ids), size)
				}
				sorted := slices.Clone(ids)
				slices.Sort(sorted)
				if len(slices.Compact(sorted)) != size {
					t.Errorf("partition %d: ids are not distinct", p)
				}
				for _, id := range ids {
					if id < 1 || id > n || int32(id%partitions) != p {
						t.Fatalf("partition %d: id %d outside 1..%d or of another partition", p, id, n)
					}
				}
				if med := sorted[size/2]; med < tc.medianMin || med > tc.medMax {
					t.Errorf("partition %d: median id %d, want in [%d, %d]", p, med, tc.medianMin, tc.medMax)
				}
				if got := float64(draws) / size; got < tc.minRatingsPerDoc {
					t.Errorf("partition %d: %.2f ratings per document, want >= %v", p, got, tc.minRatingsPerDoc)
				}
			}
		})
	}
}

// TestWorkloadsKeepTheStoreContract builds both stores small, runs the
// benchmark's write workloads on them with the same ids, and checks that
// every batch is accepted and that both stores then hold the same
// documents, checkpoints and top page: the benchmark compares like with
// like.
func TestWorkloadsKeepTheStoreContract(t *testing.T) {
	const n, size, batches = 3000, 100, 6
	r := testkit.StartRedis(t)
	ctx := context.Background()
	cw, rw, bw := newWriter(n), newWriter(n), newWriter(n)
	dir := filepath.Join(t.TempDir(), "clover")
	if err := buildClover(dir, n, cw); err != nil {
		t.Fatal(err)
	}
	bdir := filepath.Join(t.TempDir(), "bbolt")
	if err := buildBbolt(bdir, n, bw); err != nil {
		t.Fatal(err)
	}
	bs, err := boltstore.Open(bdir, boltstore.WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	if err := buildRedis(ctx, r.URL(), redisPrefix, n, rw); err != nil {
		t.Fatal(err)
	}
	cs, err := docstore.Open(dir, docstore.WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	rs, err := redisstore.Open(ctx, r.URL(), redisstore.WithPrefix(redisPrefix))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	stores := []struct {
		name string
		s    engine.Store
		w    *writer
	}{{"clover", cs, cw}, {"redis", rs, rw}, {"bbolt", bs, bw}}

	for _, newPicker := range []func(int, *rand.Rand) *picker{uniformPicker, zipfPicker} {
		for _, st := range stores {
			var epochs [partitions]int64
			for p := range int32(partitions) {
				if epochs[p], err = st.s.Claim(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			pk := newPicker(n, rand.New(rand.NewPCG(7, 7))) // same ids for both stores
			for i := range batches {
				p := int32(i % partitions)
				ids, _, err := pk.ids(p, size)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.s.Apply(ctx, st.w.batch(p, epochs[p], ids)); err != nil {
					t.Fatalf("%s: batch %d: %v", st.name, i, err)
				}
			}
		}
	}

	if !slices.Equal(cw.versions, rw.versions) || !slices.Equal(cw.versions, bw.versions) {
		t.Fatal("the writers of the two stores diverged")
	}
	if slices.Max(cw.versions) < 3 {
		t.Errorf("max version %d: the workloads rewrote no movie twice", slices.Max(cw.versions))
	}
	for id := int64(1); id <= n; id++ {
		c, err := cs.Get(ctx, id)
		if err != nil {
			t.Fatalf("clover Get(%d): %v", id, err)
		}
		rd, err := rs.Get(ctx, id)
		if err != nil {
			t.Fatalf("redis Get(%d): %v", id, err)
		}
		bb, err := bs.Get(ctx, id)
		if err != nil {
			t.Fatalf("bbolt Get(%d): %v", id, err)
		}
		want := movie(id, cw.versions[id])
		for _, got := range []engine.MovieStats{c, rd, bb} {
			if got.Version != want.Version || got.Count != want.Count || got.Sum != want.Sum || got.Partition != want.Partition {
				t.Fatalf("movie %d = %+v, want %+v", id, got, want)
			}
		}
	}
	q := engine.RangeQuery{MinAvg: 8, MaxAvg: math.Inf(1), Limit: 100}
	var tops [][]int64
	for _, st := range stores {
		for p := range int32(partitions) {
			next, ok, err := st.s.Checkpoint(ctx, p)
			if err != nil || !ok || next != st.w.next[p] {
				t.Errorf("%s: checkpoint of partition %d = %d, %v, %v; want %d", st.name, p, next, ok, err, st.w.next[p])
			}
		}
		page, err := st.s.Range(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, m := range page.Movies {
			ids = append(ids, m.MovieID)
		}
		tops = append(tops, ids)
	}
	if len(tops[0]) != q.Limit || !slices.Equal(tops[0], tops[1]) || !slices.Equal(tops[0], tops[2]) {
		t.Errorf("top 100: clover %v, redis %v, bbolt %v; want the same 100 movies", tops[0], tops[1], tops[2])
	}
}
