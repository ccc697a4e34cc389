package docstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/ostafen/clover/v2"
	d "github.com/ostafen/clover/v2/document"
	"github.com/ostafen/clover/v2/query"
)

// TestTableQueryIsServedByTheIndex proves the pushdown of table queries on
// 20,000 documents (50,000 without the race detector): a query with limit
// 10 reads at most 10 documents and visits O(10) index entries, on a
// number and a string index, in both orders, with and without bounds and
// cursors, and on a TiesAscending table (whose descending walk visits
// value groups) too. The same question asked of Clover on the unindexed
// document field walks the whole collection and gets the same answer.
func TestTableQueryIsServedByTheIndex(t *testing.T) {
	const limit = 10
	n := 50_000
	if raceEnabled {
		n = 20_000
	}
	s := openTemp(t, WithFsync(false))
	defer s.Close()
	ctx := context.Background()
	orders := mustTable(t, s, ordersSpec)
	ranked := mustTable(t, s, engine.TableSpec{Name: "ranked", Indexes: ordersSpec.Indexes, TiesAscending: true})
	start := time.Now()
	fillTable(t, orders, n, 5000)
	fillTable(t, ranked, n, 5000)
	t.Logf("filled 2 tables of %d documents in %v", n, time.Since(start))

	mid := orderDoc(n/2, 0, 1)
	cases := []struct {
		name string
		q    engine.IndexQuery
	}{
		{"number, everything", engine.IndexQuery{Index: "total"}},
		{"number, min", engine.IndexQuery{Index: "total", Min: engine.Num(100), HasMin: true}},
		{"number, max", engine.IndexQuery{Index: "total", Max: engine.Num(-10), HasMax: true}},
		{"number, closed", engine.IndexQuery{Index: "total", Min: engine.Num(-10), HasMin: true, Max: engine.Num(10), HasMax: true}},
		{"number, equal", engine.IndexQuery{Index: "total", Min: engine.Num(20.25), HasMin: true, Max: engine.Num(20.25), HasMax: true}},
		{"number, deep cursor", engine.IndexQuery{Index: "total", After: &engine.IndexCursor{Value: mid.Index[0], Key: mid.Key}}},
		{"string, everything", engine.IndexQuery{Index: "tier"}},
		{"string, min", engine.IndexQuery{Index: "tier", Min: engine.Str("gold"), HasMin: true}},
		{"string, max", engine.IndexQuery{Index: "tier", Max: engine.Str("gold"), HasMax: true}},
		{"string, closed", engine.IndexQuery{Index: "tier", Min: engine.Str("b"), HasMin: true, Max: engine.Str("h"), HasMax: true}},
		{"string, equal", engine.IndexQuery{Index: "tier", Min: engine.Str("silver"), HasMin: true, Max: engine.Str("silver"), HasMax: true}},
		{"string, deep cursor", engine.IndexQuery{Index: "tier", After: &engine.IndexCursor{Value: mid.Index[1], Key: mid.Key}}},
	}
	for _, tc := range cases {
		for _, tb := range []*table{orders, ranked} {
			for _, desc := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/desc=%v", tc.name, tb.spec.Name, desc)
				t.Run(name, func(t *testing.T) {
					q := tc.q
					q.Desc, q.Limit = desc, limit
					s.counts.reset()
					page, err := tb.Query(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					docs, steps := s.counts.docsRead(), s.counts.indexSteps.Load()
					if len(page.Docs) != limit || page.Next == nil {
						t.Fatalf("got %d documents, next %v; want a full page of %d with a cursor", len(page.Docs), page.Next, limit)
					}
					if docs > limit {
						t.Fatalf("read %d documents; want at most the limit, %d (index pushdown)", docs, limit)
					}
					// A TiesAscending descending walk visits one entry more
					// per value group (its reverse seek) and the first entry
					// after each group.
					if maxSteps := int64(3*limit + 2); steps > maxSteps {
						t.Fatalf("visited %d index entries; want at most %d", steps, maxSteps)
					}
				})
			}
		}
	}

	// The same question through Clover on the unindexed field walks the
	// collection, and gets the same answer.
	q := engine.IndexQuery{Index: "total", Min: engine.Num(100), HasMin: true, Desc: true, Limit: limit}
	page, err := orders.Query(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	s.counts.reset()
	var scanned []string
	cq := query.NewQuery(tableCollection(orders.spec.Name)).Where(query.Field(tfIndex+".total").GtEq(100.0)).
		Sort(query.SortOption{Field: tfIndex + ".total", Direction: -1}, query.SortOption{Field: tfID, Direction: -1}).
		Limit(limit)
	err = s.view(ctx, func(_ kvReader, db *clover.DB) error {
		docs, err := db.FindAll(cq)
		for _, doc := range docs {
			scanned = append(scanned, doc.Get(tfID).(string))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	steps := s.counts.indexSteps.Load() + s.counts.docScans.Load()
	t.Logf("same query on the unindexed document field through Clover: %d keys visited", steps)
	if steps < int64(n) {
		t.Fatalf("Clover's unindexed query visited %d keys; want all %d documents (the comparison is meaningless otherwise)", steps, n)
	}
	if len(scanned) != len(page.Docs) {
		t.Fatalf("Clover's answer has %d documents; the index's %d", len(scanned), len(page.Docs))
	}
	for i, id := range scanned {
		if want := docID(page.Docs[i].Key); id != want {
			t.Fatalf("position %d: index answer %s, Clover answer %s", i, want, id)
		}
	}

	// Key lookups read one document each (of those the write cache does
	// not answer: emptied here).
	s.tcache.clearAll()
	s.counts.reset()
	if _, err := orders.Get(ctx, mid.Key); err != nil {
		t.Fatal(err)
	}
	keys := make([][]byte, 100)
	for i := range keys {
		keys[i] = orderDoc(i*n/100, 0, 1).Key
	}
	loaded, err := orders.Load(ctx, keys)
	if err != nil || len(loaded) != len(keys) {
		t.Fatalf("Load = %d documents, %v; want %d", len(loaded), err, len(keys))
	}
	if got := s.counts.docsRead(); got != 1+int64(len(keys)) {
		t.Fatalf("Get and Load of %d keys read %d documents; want %d", len(keys), got, 1+len(keys))
	}
	// Clover reads a table's document by its _id.
	err = s.view(ctx, func(_ kvReader, db *clover.DB) error {
		var doc *d.Document
		doc, err := db.FindById(tableCollection(orders.spec.Name), docID(mid.Key))
		if err != nil || doc == nil {
			return fmt.Errorf("clover FindById = %v, %v", doc, err)
		}
		if got := doc.Get(tfValue); string(got.([]byte)) != string(mid.Value) {
			return fmt.Errorf("clover reads value %q; want %q", got, mid.Value)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTableQueryFiltered: a filtered query reads only the documents it
// keeps (the others are skipped in the index walk), on a plain and a
// TiesAscending table, both ways; and a query whose context is cancelled
// mid-walk stops within walkCheckEvery entries with the context's error.
func TestTableQueryFiltered(t *testing.T) {
	const n, limit = 3000, 10
	s := openTemp(t, WithFsync(false))
	defer s.Close()
	ctx := context.Background()
	orders := mustTable(t, s, ordersSpec)
	ranked := mustTable(t, s, engine.TableSpec{Name: "ranked", Indexes: ordersSpec.Indexes, TiesAscending: true})
	fillTable(t, orders, n, 1000)
	fillTable(t, ranked, n, 1000)
	quarter := func(key []byte) bool { return engine.PartitionFor(key, 4) == 1 }
	for _, tb := range []*table{orders, ranked} {
		for _, desc := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/desc=%v", tb.spec.Name, desc), func(t *testing.T) {
				q := engine.IndexQuery{Index: "total", Desc: desc, Limit: limit}
				s.counts.reset()
				page, err := tb.QueryFiltered(ctx, q, quarter)
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Docs) != limit || page.Next == nil {
					t.Fatalf("got %d documents, next %v; want a full page of %d with a cursor", len(page.Docs), page.Next, limit)
				}
				for _, d := range page.Docs {
					if !quarter(d.Key) {
						t.Fatalf("document %s is not kept by the filter", d.Key)
					}
				}
				if docs := s.counts.docsRead(); docs > limit {
					t.Fatalf("read %d documents; want at most the limit, %d (the others skipped unread)", docs, limit)
				}

				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				calls := 0
				_, err = tb.QueryFiltered(cctx, engine.IndexQuery{Index: "total", Desc: desc, Limit: n}, func([]byte) bool {
					calls++
					cancel()
					return false
				})
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("query cancelled mid-walk = %v; want context.Canceled", err)
				}
				if calls > walkCheckEvery {
					t.Fatalf("the walk went on for %d entries after its context was cancelled; want at most %d", calls, walkCheckEvery)
				}
			})
		}
	}
}
