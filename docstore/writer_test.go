package docstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/ostafen/clover/v2"
	d "github.com/ostafen/clover/v2/document"
	"go.etcd.io/bbolt"
)

// TestWriterMatchesUpdateByID applies the same batches to a store writing
// through docWriter and to one writing through Clover's UpdateById, then
// checks that both files hold the same Clover keys and values (documents
// compared decoded: msgpack map order is not fixed), and that what
// docWriter wrote reads back through Clover's public API (FindById and the
// rank-index query) as the documents that were written. It pins docWriter
// to what UpdateById writes with the pinned Clover version.
func TestWriterMatchesUpdateByID(t *testing.T) {
	ctx := t.Context()
	fast := openTemp(t, WithFsync(false))
	defer fast.Close()
	ref := openTemp(t, WithFsync(false), withCloverUpdates())
	defer ref.Close()
	if fast.cloverUpdates || !ref.cloverUpdates {
		t.Fatalf("options: fast.cloverUpdates=%v ref.cloverUpdates=%v; want false and true", fast.cloverUpdates, ref.cloverUpdates)
	}

	const movies = 400
	want := map[int64]engine.MovieStats{} // what each store must hold
	epochs := map[*Store]int64{}
	for _, s := range []*Store{fast, ref} {
		e, err := s.Claim(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		epochs[s] = e
	}
	apply := func(t *testing.T, docs []engine.MovieStats, replay bool) (errs [2]error) {
		t.Helper()
		for i, s := range []*Store{fast, ref} {
			errs[i] = s.Apply(ctx, engine.Batch{Partition: 0, Epoch: epochs[s], Docs: docs, Checkpoint: 1, Replay: replay})
		}
		return errs
	}

	r := rand.New(rand.NewPCG(7, 7))
	version := int64(0)
	next := func(id int64) engine.MovieStats {
		version++
		m := syntheticMovie(id, version)
		m.Partition = int32(r.IntN(3)) // movies move between partitions too
		return m
	}
	// Batches: first inserts, then mixes of updates (some twice in one
	// batch) and new movies.
	for round := range 12 {
		var docs []engine.MovieStats
		for range 80 {
			id := 1 + r.Int64N(movies)
			if round == 0 {
				id = 1 + r.Int64N(movies/2)
			}
			docs = append(docs, next(id))
		}
		if errs := apply(t, docs, false); errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: Apply = %v (docWriter), %v (UpdateById); want nil", round, errs[0], errs[1])
		}
		for _, m := range docs {
			if m.Version > want[m.MovieID].Version {
				want[m.MovieID] = m
			}
		}
	}

	// A stale document: refused by both (nothing written), skipped by both
	// in a replay, while the newer ones of the same batch are written.
	var stored engine.MovieStats
	for _, m := range want {
		stored = m
		break
	}
	old := stored
	old.Count++
	if errs := apply(t, []engine.MovieStats{old}, false); !errors.Is(errs[0], engine.ErrFenced) || !errors.Is(errs[1], engine.ErrFenced) {
		t.Fatalf("stale document: Apply = %v (docWriter), %v (UpdateById); want ErrFenced from both", errs[0], errs[1])
	}
	newer := next(1 + (stored.MovieID % movies))
	if errs := apply(t, []engine.MovieStats{old, newer}, true); errs[0] != nil || errs[1] != nil {
		t.Fatalf("replay with a stale document: Apply = %v (docWriter), %v (UpdateById); want nil", errs[0], errs[1])
	}
	want[newer.MovieID] = newer

	t.Run("same keys and values", func(t *testing.T) {
		a, b := cloverKV(t, fast), cloverKV(t, ref)
		if len(a) != len(b) {
			t.Fatalf("docWriter store has %d Clover keys, UpdateById store %d", len(a), len(b))
		}
		docs := 0
		for k, va := range a {
			vb, ok := b[k]
			switch {
			case !ok:
				t.Fatalf("key %q only in the docWriter store", k)
			case bytes.HasPrefix([]byte(k), docKeyPrefix):
				docs++
				da, err1 := d.Decode(va)
				db, err2 := d.Decode(vb)
				if err1 != nil || err2 != nil {
					t.Fatalf("decode %q: %v, %v", k, err1, err2)
				}
				if !reflect.DeepEqual(da.ToMap(), db.ToMap()) {
					t.Fatalf("document %q: docWriter wrote %v, UpdateById %v", k, da.ToMap(), db.ToMap())
				}
			case !bytes.Equal(va, vb):
				t.Fatalf("key %q: docWriter value %q, UpdateById value %q", k, va, vb)
			}
		}
		if docs != len(want) {
			t.Fatalf("compared %d documents; want %d", docs, len(want))
		}
	})

	t.Run("reads back through Clover", func(t *testing.T) {
		err := fast.view(ctx, func(_ *bbolt.Tx, db *clover.DB) error {
			for id, m := range want {
				doc, err := db.FindById(collection, docID(id))
				if err != nil || doc == nil {
					t.Fatalf("FindById(%d) = %v, %v", id, doc, err)
				}
				got, err := fromDocument(doc)
				if err != nil || !reflect.DeepEqual(got, m) {
					t.Fatalf("FindById(%d) = %+v, %v; want %+v", id, got, err, m)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		page, err := fast.Range(ctx, engine.RangeQuery{MinAvg: 0, MaxAvg: math.Inf(1), Limit: len(want) + 1})
		if err != nil {
			t.Fatal(err)
		}
		order := make([]engine.MovieStats, 0, len(want))
		for _, m := range want {
			order = append(order, m)
		}
		slices.SortFunc(order, func(a, b engine.MovieStats) int {
			if c := cmp.Compare(b.Avg(), a.Avg()); c != 0 {
				return c
			}
			return cmp.Compare(a.MovieID, b.MovieID)
		})
		if len(page.Movies) != len(order) {
			t.Fatalf("rank-index query returned %d movies; want %d", len(page.Movies), len(order))
		}
		for i := range order {
			if !reflect.DeepEqual(page.Movies[i], order[i]) {
				t.Fatalf("rank-index query, position %d: %+v; want %+v", i, page.Movies[i], order[i])
			}
		}
		if err := checkIndexAgrees(fast); err != nil {
			t.Fatal(err)
		}
	})
}

// cloverKV returns every key and value of the store's Clover bucket.
func cloverKV(t *testing.T, s *Store) map[string][]byte {
	t.Helper()
	kv := map[string][]byte{}
	err := s.view(context.Background(), func(tx *bbolt.Tx, _ *clover.DB) error {
		return tx.Bucket(cloverBucket).ForEach(func(k, v []byte) error {
			kv[string(k)] = bytes.Clone(v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
