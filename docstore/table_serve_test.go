package docstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestTableLoadFromCacheIsTheStoredDocument writes documents of every
// shape the cache tells apart (nil or empty value and sources, one or two
// sources, a value over maxCachedValue, a table without indexes) and
// checks that Load answers each as the store does (Get), whether the
// cache answered it or not, and that the small ones were answered without
// a read.
func TestTableLoadFromCacheIsTheStoredDocument(t *testing.T) {
	big := make([]byte, maxCachedValue+1)
	for _, tc := range []struct {
		name   string
		spec   engine.TableSpec
		doc    engine.Doc
		served bool
	}{
		{"one source", ordersSpec, orderDoc(1, 0, 3), true},
		{"nil value and sources", ordersSpec, withDoc(orderDoc(2, 0, 3), func(d *engine.Doc) { d.Value, d.Sources = nil, nil }), true},
		{"empty value and sources", ordersSpec, withDoc(orderDoc(3, 0, 3), func(d *engine.Doc) { d.Value, d.Sources = []byte{}, map[int32]int64{} }), true},
		{"source of another partition", ordersSpec, withDoc(orderDoc(4, 0, 3), func(d *engine.Doc) { d.Sources = map[int32]int64{7: 9} }), true},
		{"two sources", ordersSpec, withDoc(orderDoc(5, 0, 3), func(d *engine.Doc) { d.Sources = map[int32]int64{0: 3, 1: 4} }), false},
		{"large value", ordersSpec, withDoc(orderDoc(6, 0, 3), func(d *engine.Doc) { d.Value = big }), false},
		{"no indexes, nil index", engine.TableSpec{Name: "plain"}, withDoc(orderDoc(7, 0, 3), func(d *engine.Doc) { d.Index = nil }), true},
		{"no indexes, empty index", engine.TableSpec{Name: "plain"}, withDoc(orderDoc(8, 0, 3), func(d *engine.Doc) { d.Index = []engine.IndexValue{} }), true},
		{"movie document", engine.MovieSpec, movieTableDoc(42, 0, 5, 3, 12.5), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := openTemp(t, WithFsync(false))
			defer s.Close()
			tb := mustTable(t, s, tc.spec)
			applyDocs(t, tb, 0, 1, tc.doc)
			s.counts.reset()
			got, err := tb.Load(ctx, [][]byte{tc.doc.Key})
			if err != nil {
				t.Fatal(err)
			}
			if reads := s.counts.docsRead(); (reads == 0) != tc.served {
				t.Errorf("Load read %d documents; want served from the cache: %v", reads, tc.served)
			}
			stored, err := tb.Get(ctx, tc.doc.Key)
			if err != nil {
				t.Fatal(err)
			}
			d := got[string(tc.doc.Key)]
			if !sameTableDoc(d, stored) || (d.Value == nil) != (stored.Value == nil) ||
				(d.Sources == nil) != (stored.Sources == nil) || (d.Index == nil) != (stored.Index == nil) {
				t.Errorf("Load = %#v; want the stored %#v", d, stored)
			}
		})
	}
}

// withDoc returns d changed by fn.
func withDoc(d engine.Doc, fn func(*engine.Doc)) engine.Doc {
	fn(&d)
	return d
}

// TestTableLoadSeesWholeBatchesUnderConcurrentApply applies batches that
// give every key of a table the same new version while Loads run: every
// Load must return one version for all keys (never part of a batch),
// whether the cache answered it (all of it, or the keys it holds, with
// the rest read from the store) or the store did. The cache holds every
// key, or half of them (evictions between the batches), or none.
func TestTableLoadSeesWholeBatchesUnderConcurrentApply(t *testing.T) {
	const keys = 200
	batches := 100
	if raceEnabled {
		batches = 60
	}
	for _, tc := range []struct {
		name  string
		cache int
	}{
		{"cache holds every key", 2 * keys},
		{"cache holds half", keys / 2},
		{"no cache", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := openTemp(t, WithFsync(false), WithWriteCache(tc.cache))
			defer s.Close()
			tb := mustTable(t, s, ordersSpec)
			all := make([][]byte, keys) // read by the Loads
			for i := range all {
				all[i] = orderDoc(i, 0, 1).Key
			}
			batch := func(v int64) []engine.Doc {
				docs := make([]engine.Doc, keys)
				for i := range docs {
					docs[i] = orderDoc(i, 0, v)
				}
				return docs
			}
			epoch, err := tb.Claim(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: batch(1), Checkpoint: 1}); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			var servedMu sync.Mutex
			served := 0 // Loads that read fewer documents than keys
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 7))
					for {
						select {
						case <-done:
							return
						default:
						}
						ask := all[:1+r.IntN(keys)]
						before := s.counts.docsRead()
						got, err := tb.Load(ctx, ask)
						if err != nil {
							errs <- err
							return
						}
						if s.counts.docsRead()-before < int64(len(ask)) {
							servedMu.Lock()
							served++
							servedMu.Unlock()
						}
						if err := sameVersion(got, len(ask)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			for v := int64(2); v <= int64(batches); v++ {
				if err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: batch(v), Checkpoint: v}); err != nil {
					t.Fatal(err)
				}
			}
			close(done)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			t.Logf("%d Loads answered (in part) from the cache", served)
			if tc.cache > 0 && served == 0 {
				t.Errorf("no Load was answered from the cache; the test did not exercise it")
			}
		})
	}
}

// sameVersion checks that got holds n documents of one version.
func sameVersion(got map[string]engine.Doc, n int) error {
	if len(got) != n {
		return fmt.Errorf("Load returned %d documents; want %d", len(got), n)
	}
	var v int64 = -1
	for k, d := range got {
		if v >= 0 && d.Version != v {
			return fmt.Errorf("Load mixed batches: %s at version %d, another key at %d", k, d.Version, v)
		}
		v = d.Version
		want := orderDoc(0, 0, v) // the value names the version
		if wantV := fmt.Sprintf(`"v":%d}`, v); !sameSuffix(d.Value, wantV) {
			return fmt.Errorf("Load: %s at version %d holds value %s; want one of version %d (%s)", k, v, d.Value, v, want.Value)
		}
	}
	return nil
}

func sameSuffix(b []byte, suffix string) bool {
	return len(b) >= len(suffix) && string(b[len(b)-len(suffix):]) == suffix
}
