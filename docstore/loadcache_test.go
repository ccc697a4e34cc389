package docstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestLoadAnswersFromTheWriteCache checks that Load answers for the movies
// the write cache knows without reading them, reads the others (unknown,
// or with other sources than their own partition), and returns, document
// for document, what point reads of the store return.
func TestLoadAnswersFromTheWriteCache(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, WithFsync(false), WithWriteCache(1000))
	defer s.Close()
	epoch, err := s.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var docs []engine.MovieStats
	for id := int64(1); id <= 200; id++ {
		docs = append(docs, ownSource(syntheticMovie(id, 1)))
	}
	// Every movie is cached by the write that stored it.
	if err := s.Apply(ctx, engine.Batch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: 200}); err != nil {
		t.Fatal(err)
	}
	<-s.Warmed()
	for i, sources := range []map[int32]int64{{0: 5, 2: 9}, nil, {1: 4}} {
		m := syntheticMovie(int64(7+i), 2)
		m.Sources = sources
		applyOne(t, s, 0, m, int64(300+i))
	}
	var unknown []int64
	for id := int64(150); id <= 200; id++ {
		unknown = append(unknown, id)
	}
	s.wmu.Lock()
	s.priors.forget(unknown)
	s.wmu.Unlock()
	if _, err := s.Load(ctx, []int64{5000, 5001}); err != nil { // learned absent
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		ids   []int64
		reads int64
	}{
		{"cached", []int64{1, 2, 3, 50, 149}, 0},
		{"two sources", []int64{7}, 1},
		{"no source", []int64{8}, 1},
		{"another partition's source", []int64{9}, 1},
		{"unknown", []int64{150, 151, 199}, 3},
		{"known absent", []int64{5000, 5001}, 0},
		{"mixed", []int64{160, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 150, 151, 152, 153, 5000, 154}, 6}, // 150 and 151 learned above
		{"unknown, sorted path", []int64{190, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 1}, 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.counts.docGets.Load()
			got, err := s.Load(ctx, tc.ids)
			if err != nil {
				t.Fatal(err)
			}
			if n := s.counts.docGets.Load() - before; n != tc.reads {
				t.Errorf("Load read %d documents; want %d", n, tc.reads)
			}
			want := map[int64]engine.MovieStats{}
			if err := s.read(ctx, func(r kvReader) error { return s.loadPoints(r, tc.ids, want) }); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Load(%v)\n got %+v\nwant %+v (point reads)", tc.ids, got, want)
			}
		})
	}
}

// TestLoadFromTheCacheUnderConcurrentWrites runs Loads answered mostly by
// the write cache beside a writer: every document a Load returns must be
// whole (count, sum and source of the version it carries; a torn cache
// entry would mix two versions), and at the end Load must return every
// movie at its last version.
func TestLoadFromTheCacheUnderConcurrentWrites(t *testing.T) {
	s, epoch := openClaimed(t, WithFsync(false), WithWriteCache(150))
	defer s.Close()
	ctx := context.Background()
	const movies = 200
	stop := loadConcurrently(11, func(r *rand.Rand) error {
		ids := make([]int64, 20)
		for i := range ids {
			ids[i] = r.Int64N(movies) + 1
		}
		got, err := s.Load(ctx, ids)
		if err != nil {
			return err
		}
		for id, m := range got {
			want := syntheticMovie(id, m.Version)
			want.Partition = 0
			if id%5 != 0 {
				want = ownSource(want)
			}
			if !reflect.DeepEqual(m, want) {
				return fmt.Errorf("load returned a document no write stored: got %+v, want %+v", m, want)
			}
		}
		return nil
	})
	version := applyRandom(t, s, epoch, 5, movies, stop, func(m engine.MovieStats) engine.MovieStats {
		if m.MovieID%5 != 0 { // the others are read from the store
			m = ownSource(m)
		}
		return m
	})
	ids := make([]int64, 0, movies)
	for id := range version {
		ids = append(ids, id)
	}
	got, err := s.Load(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range version {
		if got[id].Version != v {
			t.Fatalf("Load: movie %d at version %d; want %d (the last write)", id, got[id].Version, v)
		}
	}
}

// ownSource returns m with one source: its own partition, at its version
// (as the movie job's documents have).
func ownSource(m engine.MovieStats) engine.MovieStats {
	m.Sources = map[int32]int64{m.Partition: m.Version}
	return m
}
