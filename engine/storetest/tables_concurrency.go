package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/keepstate/keepstate/engine"
)

// testTableConcurrentReaders runs readers while batches move keys 1 and 2
// together: both get version k, index values k (and "v<k>") and a value
// naming k, so they stay tied and adjacent in every index, above the static
// key 3. A reader seeing two versions in one answer, an index entry that
// disagrees with its doc, or a doc twice or missing saw a partly applied
// batch; a Get whose version goes down saw time run backwards.
func testTableConcurrentReaders(t *testing.T, open TablesOpener, sh shape) {
	_, tb := openTable(t, open, sh.spec)
	const batches = 100
	pairDoc := func(i int, k int64) engine.Doc {
		d := tdoc(sh, i, 0, k, float64(k), fmt.Sprintf("v%05d", k))
		d.Value = []byte(fmt.Sprintf("version %d", k))
		return d
	}
	i1, i2 := 1, 2 // the pair's keys, k1 < k2
	if bytes.Compare(sh.keyIn(i1, 0), sh.keyIn(i2, 0)) > 0 {
		i1, i2 = i2, i1
	}
	pair := func(k int64) []engine.Doc { return []engine.Doc{pairDoc(i1, k), pairDoc(i2, k)} }
	static := tdoc(sh, 3, 0, 1, -1, "")
	k1, k2, k3 := sh.keyIn(i1, 0), sh.keyIn(i2, 0), sh.keyIn(3, 0)
	tapply(t, tb, 0, 1, append(pair(1), static)...)
	epoch := tclaim(t, tb, 0)

	// consistent returns the version of d, the pair's doc i, or an error.
	consistent := func(i int, d engine.Doc) (int64, error) {
		if want := pairDoc(i, d.Version); !sameDoc(sh.spec, d, want) {
			return 0, fmt.Errorf("doc %s is not version %d's %s", showDoc(d), d.Version, showDoc(want))
		}
		return d.Version, nil
	}
	// samePair checks that a and b are keys 1 and 2 of one batch.
	samePair := func(what string, a, b engine.Doc) error {
		va, errA := consistent(i1, a)
		vb, errB := consistent(i2, b)
		if err := errors.Join(errA, errB); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if va != vb {
			return fmt.Errorf("%s saw a partial batch: key 1 at version %d, key 2 at %d", what, va, vb)
		}
		return nil
	}

	// Readers stop at the first failure (g cancels c); Apply runs on base,
	// which is cancelled only when it fails.
	base, cancel := context.WithCancel(ctx(t))
	defer cancel()
	g, c := errgroup.WithContext(base)
	var lastGet atomic.Int64
	readers := []func() error{
		func() error { // Load sees both docs of one batch
			got, err := tb.Load(c, [][]byte{k1, k2, k3})
			if err != nil {
				return fmt.Errorf("load: %w", err)
			}
			if len(got) != 3 {
				return fmt.Errorf("load returned %d docs; want 3", len(got))
			}
			return samePair("load", got[string(k1)], got[string(k2)])
		},
		func() error { // ascending queries see each doc once, in one state
			for _, ix := range sh.spec.Indexes {
				page, err := tb.Query(c, engine.IndexQuery{Index: ix.Name, Limit: 10})
				if err != nil {
					return fmt.Errorf("query %s: %w", ix.Name, err)
				}
				if len(page.Docs) != 3 || !sameDoc(sh.spec, page.Docs[0], static) {
					return fmt.Errorf("query %s returned %v; want [%s %s %s]", ix.Name, showKeys(page.Docs),
						showKey(k3), showKey(k1), showKey(k2))
				}
				if err := samePair("query "+ix.Name, page.Docs[1], page.Docs[2]); err != nil {
					return err
				}
			}
			return nil
		},
		func() error { // descending bounded queries too
			for pos, ix := range sh.spec.Indexes {
				q := engine.IndexQuery{Index: ix.Name, Desc: true, Limit: 2, Min: index(sh.spec, 0.5, "v")[pos], HasMin: true}
				page, err := tb.Query(c, q)
				if err != nil {
					return fmt.Errorf("query %s: %w", showQuery(q), err)
				}
				if len(page.Docs) != 2 {
					return fmt.Errorf("query %s returned %v; want [%s %s]", showQuery(q), showKeys(page.Docs), showKey(k2), showKey(k1))
				}
				first, second := page.Docs[1], page.Docs[0] // the exact reverse of ascending
				if sh.spec.TiesAscending {
					first, second = page.Docs[0], page.Docs[1] // ties still by key ascending
				}
				if err := samePair("query "+showQuery(q), first, second); err != nil {
					return err
				}
			}
			return nil
		},
		func() error { // Get never goes back in time
			d, err := tb.Get(c, k1)
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			v, err := consistent(i1, d)
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			if last := lastGet.Swap(v); v < last {
				return fmt.Errorf("get(1) version went from %d back to %d", last, v)
			}
			return nil
		},
	}
	done := make(chan struct{})
	reads := make([]atomic.Int64, len(readers))
	for i, read := range readers {
		g.Go(func() error {
			for c.Err() == nil {
				final := false
				select {
				case <-done:
					final = true // this read starts after the last batch
				default:
				}
				if err := read(); err != nil {
					return err
				}
				reads[i].Add(1)
				if final {
					return nil
				}
			}
			return nil
		})
	}
	var applyErr error
	for k := int64(2); k <= batches && c.Err() == nil; k++ {
		if err := tb.Apply(base, tbatch(0, epoch, k, pair(k)...)); err != nil {
			applyErr = fmt.Errorf("apply batch %d: %w", k, err)
			cancel()
			break
		}
	}
	close(done)
	readErr := g.Wait()
	if applyErr != nil {
		t.Fatal(applyErr)
	}
	if readErr != nil {
		t.Fatal(readErr)
	}
	for i := range reads {
		if reads[i].Load() == 0 {
			t.Errorf("reader %d never completed a read", i)
		}
	}
	wantTDoc(t, tb, pairDoc(i1, batches), pairDoc(i2, batches))
	wantTCheckpoint(t, tb, 0, batches, true)
}
