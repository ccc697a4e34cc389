package docstore

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/keepstate/keepstate/engine"
	"github.com/ostafen/clover/v2"
	"github.com/ostafen/clover/v2/query"
)

// openCloverReadOnly opens the store of the data directory dir (not open
// elsewhere) read-only with Clover's own API, on one snapshot: Clover's
// documents and metadata are the store's, bound by cloverStore.
func openCloverReadOnly(t *testing.T, dir string) *clover.DB {
	t.Helper()
	db, err := pebble.Open(filepath.Join(dir, storeDir), &pebble.Options{ReadOnly: true, Logger: pebbleLogger{log: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	snap := (&pebbleKV{db: db}).snapshot()
	t.Cleanup(func() {
		snap.release()
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	cdb, err := clover.OpenWithStore(&cloverStore{r: snap, counts: &readCounts{}})
	if err != nil {
		t.Fatal(err)
	}
	return cdb
}

// cloverFields is what Clover reads of a table document: its fields as
// Clover's decoder returns them.
func cloverFields(spec engine.TableSpec, doc engine.Doc) map[string]any {
	sources := map[string]any{}
	for p, off := range doc.Sources {
		sources[strconv.Itoa(int(p))] = off
	}
	index := map[string]any{}
	for i, ix := range spec.Indexes {
		if ix.Kind == engine.IndexNumber {
			index[ix.Name] = doc.Index[i].Num
		} else {
			index[ix.Name] = doc.Index[i].Str
		}
	}
	return map[string]any{tfID: hex.EncodeToString(doc.Key), tfKey: doc.Key, tfPartition: int64(doc.Partition),
		tfVersion: doc.Version, tfValue: doc.Value, tfSources: sources, tfIndex: index}
}

// TestCloverReadsTables migrates the fixture, then reads the data
// directory with Clover's own API: every document of the tables movies
// and orders is there with its fields, each collection's size is right,
// and Clover's queries on an indexed field (a scan for Clover: the table
// indexes are not Clover's) return the documents the tables' pushed-down
// queries return, in the same order.
func TestCloverReadsTables(t *testing.T) {
	dir, want := loadFixture(t)
	s, err := openMigrating(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	movies, orders := mustTable(t, s, moviesSpec), mustTable(t, s, fixtureOrdersSpec)
	type check struct {
		name   string
		table  *table
		docs   []engine.Doc
		q      engine.IndexQuery
		clover *query.Query
		ids    []string // the table's answer
	}
	var movieDocs []engine.Doc
	for _, m := range want.Movies {
		movieDocs = append(movieDocs, m.doc())
	}
	byID := func(field string, dir int) []query.SortOption {
		return []query.SortOption{{Field: field, Direction: dir}}
	}
	checks := []check{
		{name: "movies avg >= 4, descending", table: movies, docs: movieDocs,
			q: engine.IndexQuery{Index: "avg", Min: engine.Num(4), HasMin: true, Desc: true},
			clover: query.NewQuery("t_movies").Where(query.Field("index.avg").GtEq(4.0)).
				Sort(append(byID("index.avg", -1), byID(tfID, 1)...)...)}, // ties by key ascending (TiesAscending)
		{name: "movies avg in [1, 2], ascending", table: movies, docs: movieDocs,
			q: engine.IndexQuery{Index: "avg", Min: engine.Num(1), HasMin: true, Max: engine.Num(2), HasMax: true},
			clover: query.NewQuery("t_movies").Where(query.Field("index.avg").GtEq(1.0).And(query.Field("index.avg").LtEq(2.0))).
				Sort(append(byID("index.avg", 1), byID(tfID, 1)...)...)},
		{name: "orders total >= 100, descending", table: orders, docs: want.Orders.Docs,
			q: engine.IndexQuery{Index: "total", Min: engine.Num(100), HasMin: true, Desc: true},
			clover: query.NewQuery("t_orders").Where(query.Field("index.total").GtEq(100.0)).
				Sort(append(byID("index.total", -1), byID(tfID, -1)...)...)},
		{name: "orders tier = gold", table: orders, docs: want.Orders.Docs,
			q:      engine.IndexQuery{Index: "tier", Min: engine.Str("gold"), HasMin: true, Max: engine.Str("gold"), HasMax: true},
			clover: query.NewQuery("t_orders").Where(query.Field("index.tier").Eq("gold")).Sort(byID(tfID, 1)...)},
	}
	for i := range checks {
		for _, doc := range queryAll(t, checks[i].table, checks[i].q, 50) {
			checks[i].ids = append(checks[i].ids, hex.EncodeToString(doc.Key))
		}
		if len(checks[i].ids) < 5 {
			t.Fatalf("%s: the table answers %d documents; want a few to compare", checks[i].name, len(checks[i].ids))
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	db := openCloverReadOnly(t, dir)
	for _, name := range []string{"t_movies", "t_orders"} {
		if has, err := db.HasCollection(name); err != nil || !has {
			t.Fatalf("Clover HasCollection(%s) = %v, %v; want true", name, has, err)
		}
	}
	for _, c := range []struct {
		coll string
		spec engine.TableSpec
		docs []engine.Doc
	}{{"t_movies", moviesSpec, movieDocs}, {"t_orders", fixtureOrdersSpec, want.Orders.Docs}} {
		t.Run("all of "+c.coll, func(t *testing.T) {
			n, err := db.Count(query.NewQuery(c.coll))
			if err != nil || n != len(c.docs) {
				t.Fatalf("Clover counts %d documents, %v; want %d", n, err, len(c.docs))
			}
			found, err := db.FindAll(query.NewQuery(c.coll))
			if err != nil || len(found) != len(c.docs) {
				t.Fatalf("Clover finds %d documents, %v; want %d", len(found), err, len(c.docs))
			}
			got := map[string]map[string]any{}
			for _, doc := range found {
				got[doc.ObjectId()] = doc.AsMap()
			}
			for _, doc := range c.docs {
				want := cloverFields(c.spec, doc)
				if g := got[want[tfID].(string)]; !reflect.DeepEqual(g, want) {
					t.Fatalf("Clover reads %v; want %v", g, want)
				}
			}
		})
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			found, err := db.FindAll(c.clover)
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]string, len(found))
			for i, doc := range found {
				ids[i] = doc.ObjectId()
			}
			if !slices.Equal(ids, c.ids) {
				t.Fatalf("Clover answers %d documents, the table %d; first difference at %d", len(ids), len(c.ids), firstDiff(ids, c.ids))
			}
		})
	}
	if doc, err := db.FindById("t_movies", hex.EncodeToString(movieDocs[7].Key)); err != nil || doc == nil ||
		fmt.Sprint(doc.Get("index.avg")) != fmt.Sprint(movieDocs[7].Index[0].Num) {
		t.Fatalf("Clover FindById = %v, %v; want movie %x with avg %v", doc, err, movieDocs[7].Key, movieDocs[7].Index[0].Num)
	}
}

// firstDiff returns the first position where a and b differ.
func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
