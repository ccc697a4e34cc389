package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

func testOpenTableInvalid(t *testing.T, open TablesOpener) {
	ts := open(t)
	nine := make([]engine.IndexSpec, engine.MaxIndexes+1)
	for i := range nine {
		nine[i] = engine.IndexSpec{Name: "i" + string(rune('0'+i)), Kind: engine.IndexNumber}
	}
	cases := []struct {
		name string
		spec engine.TableSpec
	}{
		{"empty name", engine.TableSpec{}},
		{"upper-case name", engine.TableSpec{Name: "Movies"}},
		{"name with a colon", engine.TableSpec{Name: "a:b"}},
		{"name with a slash", engine.TableSpec{Name: "a/b"}},
		{"name starting with a digit", engine.TableSpec{Name: "1movies"}},
		{"too many indexes", engine.TableSpec{Name: "wide", Indexes: nine}},
		{"index without a name", engine.TableSpec{Name: "t", Indexes: []engine.IndexSpec{{Kind: engine.IndexNumber}}}},
		{"index of unknown kind", engine.TableSpec{Name: "t", Indexes: []engine.IndexSpec{{Name: "x"}}}},
		{"index declared twice", engine.TableSpec{Name: "t", Indexes: []engine.IndexSpec{
			{Name: "x", Kind: engine.IndexNumber}, {Name: "x", Kind: engine.IndexString}}}},
	}
	for _, tc := range cases {
		if tc.spec.Validate() == nil {
			t.Fatalf("test bug: spec %+v is valid", tc.spec)
		}
		if tb, err := ts.OpenTable(ctx(t), tc.spec); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("OpenTable(%s) = %v, %v; want ErrInvalid", tc.name, tb, err)
		}
	}
	// A valid table still opens after refused ones.
	mustOpen(t, ts, cloneSpec(MovieShape))
}

func testReopenSameSpec(t *testing.T, open TablesOpener, sh shape) {
	ts, first := openTable(t, open, sh.spec)
	if got := first.Spec(); got.Name != sh.spec.Name || !slices.Equal(got.Indexes, sh.spec.Indexes) ||
		got.TiesAscending != sh.spec.TiesAscending {
		t.Fatalf("Spec() = %+v; want %+v", got, sh.spec)
	}
	d := tdoc(sh, 1, 0, 1, 2.5, "gold")
	tapply(t, first, 0, 3, d)
	old := tclaim(t, first, 0)
	// A second handle, as a restarted job opens it, sees the same table.
	second := mustOpen(t, ts, cloneSpec(sh.spec))
	if got := second.Spec(); got.Name != sh.spec.Name || !slices.Equal(got.Indexes, sh.spec.Indexes) {
		t.Fatalf("reopened Spec() = %+v; want %+v", got, sh.spec)
	}
	wantTDoc(t, second, d)
	wantTCheckpoint(t, second, 0, 3, true)
	wantTPage(t, second, tmodelOf([]engine.Doc{d}), engine.IndexQuery{Index: sh.spec.Indexes[0].Name, Limit: 5})
	// Epochs are shared: a claim through one handle fences the other.
	current := tclaim(t, second, 0)
	if current <= old {
		t.Fatalf("claim through the second handle = %d; want > %d", current, old)
	}
	e := tdoc(sh, 2, 0, 1, 1, "a")
	wantApply(t, first, tbatch(0, old, 4, e), engine.ErrFenced, "through the first handle with the old epoch")
	wantApply(t, first, tbatch(0, current, 4, e), nil,
		"through the first handle with the epoch claimed through the second")
	wantTDoc(t, second, e)
	wantTCheckpoint(t, second, 0, 4, true)
}

func testReopenDifferentSpec(t *testing.T, open TablesOpener) {
	base := cloneSpec(OrderShape)
	total, tier := base.Indexes[0], base.Indexes[1]
	cases := []struct {
		name    string
		indexes []engine.IndexSpec
	}{
		{"index added", []engine.IndexSpec{total, tier, {Name: "region", Kind: engine.IndexString}}},
		{"index removed", []engine.IndexSpec{total}},
		{"no indexes", nil},
		{"index renamed", []engine.IndexSpec{total, {Name: "level", Kind: tier.Kind}}},
		{"index kind changed", []engine.IndexSpec{total, {Name: tier.Name, Kind: engine.IndexNumber}}},
		{"indexes reordered", []engine.IndexSpec{tier, total}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts, tb := openTable(t, open, base)
			sh := shape{spec: base, key: customerKey}
			d := tdoc(sh, 1, 0, 1, 2.5, "gold")
			tapply(t, tb, 0, 3, d)
			spec := engine.TableSpec{Name: base.Name, Indexes: tc.indexes, Partitions: Partitions}
			if other, err := ts.OpenTable(ctx(t), spec); !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("reopening %s with %s = %v, %v; want ErrInvalid", base.Name, tc.name, other, err)
			}
			// The table is untouched and still opens with its own spec.
			wantTDoc(t, tb, d)
			again := mustOpen(t, ts, cloneSpec(base))
			wantTDoc(t, again, d)
			wantTCheckpoint(t, again, 0, 3, true)
		})
	}
}

// testTablesIsolated opens two tables of each shape with prefix-related
// names in one store and checks that nothing leaks between them: keys,
// epochs, versions and checkpoints are per table, and a drop or reset of
// one leaves the other alone.
func testTablesIsolated(t *testing.T, open TablesOpener) {
	ts := open(t)
	pairs := map[string][2]engine.Table{}
	for _, sh := range shapes() {
		other := cloneSpec(sh.spec)
		other.Name += "-2"
		pairs[sh.name] = [2]engine.Table{mustOpen(t, ts, sh.spec), mustOpen(t, ts, other)}
	}
	// Every table is open at once; tables of two shapes may share a key
	// by accident of encoding, never a document.
	for _, sh := range shapes() {
		t.Run(sh.name, func(t *testing.T) {
			a, b := pairs[sh.name][0], pairs[sh.name][1]
			da := []engine.Doc{tdoc(sh, 1, 0, 5, 1, "a"), tdoc(sh, 2, 0, 5, 2, "b")}
			db := []engine.Doc{tdoc(sh, 1, 0, 3, 9, "z"), tdoc(sh, 3, 0, 3, 8, "y")}
			ea := tclaim(t, a, 0)
			for range 3 {
				tclaim(t, b, 0)
			}
			eb := tclaim(t, b, 0)
			// Claims of b did not fence a, nor a's claims b.
			wantApply(t, a, tbatch(0, ea, 10, da...), nil,
				"to "+a.Spec().Name+" after claims of "+b.Spec().Name)
			// A lower version in b than in a is not stale: versions are per table.
			wantApply(t, b, tbatch(0, eb, 20, db...), nil, "to "+b.Spec().Name)
			wantTDoc(t, a, da[0])
			wantTDoc(t, b, db[0])
			wantTAbsent(t, a, db[1].Key)
			wantTAbsent(t, b, da[1].Key)
			wantTCheckpoint(t, a, 0, 10, true)
			wantTCheckpoint(t, b, 0, 20, true)
			mda := tmodelOf(da)
			wantTIndexes(t, a, sh, mda, 10, false)
			wantTIndexes(t, b, sh, tmodelOf(db), 10, false)
			wantTLoad(t, a, [][]byte{db[1].Key, da[0].Key}, mda) // only its own

			tdrop(t, b, 0)
			wantTDoc(t, a, da...)
			wantTCheckpoint(t, a, 0, 10, true)
			wantTCheckpoint(t, b, 0, 0, false)
			wantTAbsent(t, b, db[0].Key)
			wantTIndexes(t, a, sh, mda, 10, false)
			wantTIndexes(t, b, sh, tmodel{}, 10, false)
			if rb, ok := b.(engine.TableResetter); ok {
				if err := rb.Reset(ctx(t)); err != nil {
					t.Fatalf("Reset: %v", err)
				}
				wantTDoc(t, a, da[1])
				wantTCheckpoint(t, a, 0, 10, true)
				// a's epoch is still current.
				wantApply(t, a, tbatch(0, ea, 11), nil, "to "+a.Spec().Name+" after a reset of "+b.Spec().Name)
			}
		})
	}
}

// testTableWithoutIndexes checks a table that declares no index: documents
// carry no index values and every query is invalid.
func testTableWithoutIndexes(t *testing.T, open TablesOpener) {
	spec := engine.TableSpec{Name: "plain", Partitions: Partitions}
	sh := shape{name: "plain", spec: spec, key: customerKey}
	_, tb := openTable(t, open, spec)
	d := tdoc(sh, 1, 0, 1, 0, "")
	tapply(t, tb, 0, 1, d)
	wantTDoc(t, tb, d)
	bad := tdoc(sh, 2, 0, 1, 0, "")
	bad.Index = []engine.IndexValue{engine.Num(1)}
	wantApply(t, tb, tbatch(0, tclaim(t, tb, 0), 0, bad), engine.ErrInvalid,
		"of a doc with an index value to a table without indexes")
	if page, err := tb.Query(ctx(t), engine.IndexQuery{Index: "avg", Limit: 5}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("Query of a table without indexes = %d docs, %v; want ErrInvalid", len(page.Docs), err)
	}
}
