package storetest

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// eachIndex runs fn as a sub-test for every declared index of sh.
func eachIndex(t *testing.T, sh shape, fn func(t *testing.T, ix engine.IndexSpec)) {
	t.Helper()
	for _, ix := range sh.spec.Indexes {
		t.Run(ix.Name, func(t *testing.T) { fn(t, ix) })
	}
}

// bound is one side of a query range.
type bound struct {
	set bool
	v   engine.IndexValue
}

func num(v float64) bound { return bound{true, engine.Num(v)} }
func str(v string) bound  { return bound{true, engine.Str(v)} }

var unbounded bound

// boundCase is a named query range.
type boundCase struct {
	name     string
	min, max bound
}

// boundCases are the ranges each index kind is queried with: min only, max
// only, both, equal and empty, with bounds on, between, beyond and at the
// edges of stored values.
var boundCases = map[engine.IndexKind][]boundCase{
	engine.IndexNumber: {
		{"everything", unbounded, unbounded},
		{"min at a stored value", num(2.5), unbounded},
		{"min between stored values", num(2.6), unbounded},
		{"min zero takes -0", num(0), unbounded},
		{"min -0 takes 0", num(negZero), unbounded},
		{"min below everything", num(-math.MaxFloat64), unbounded},
		{"min at the largest value", num(math.MaxFloat64), unbounded},
		{"min -Inf", num(math.Inf(-1)), unbounded},
		{"max at a stored value", unbounded, num(-1)},
		{"max -0 takes 0", unbounded, num(negZero)},
		{"max zero takes -0", unbounded, num(0)},
		{"max smallest denormal", unbounded, num(5e-324)},
		{"max +Inf", unbounded, num(math.Inf(1))},
		{"max between the two most negative values", unbounded, num(-1.7e308)},
		{"closed range", num(-2.5), num(7.5)},
		{"closed range of extremes", num(-1e300), num(1e300)},
		{"closed range around zero", num(-5e-324), num(5e-324)},
		{"infinite range", num(math.Inf(-1)), num(math.Inf(1))},
		{"equal 2.5", num(2.5), num(2.5)},
		{"equal one third", num(1.0 / 3), num(1.0 / 3)},
		{"equal zero", num(0), num(0)},
		{"equal -0", num(negZero), num(negZero)},
		{"equal the largest", num(math.MaxFloat64), num(math.MaxFloat64)},
		{"equal the most negative", num(-math.MaxFloat64), num(-math.MaxFloat64)},
		{"equal 2^53", num(1 << 53), num(1 << 53)},
		{"equal an absent value", num(3), num(3)},
		{"empty: min above max", num(7.5), num(2.5)},
	},
	engine.IndexString: {
		{"everything", unbounded, unbounded},
		{"min empty string", str(""), unbounded},
		{"min at a stored value", str("ab"), unbounded},
		{"min between stored values", str("aa"), unbounded},
		{"min is a prefix", str("a"), unbounded},
		{"min with a NUL byte", str("a\x00"), unbounded},
		{"min U+FFFF", str("\uffff"), unbounded},
		{"min above everything", str("\U0010FFFF"), unbounded},
		{"max empty string", unbounded, str("")},
		{"max at a stored value", unbounded, str("gold")},
		{"max uppercase", unbounded, str("Z")},
		{"max U+00FF", unbounded, str("\u00ff")},
		{"closed range", str("a"), str("b")},
		{"closed range across cases", str("A"), str("z")},
		{"equal empty string", str(""), str("")},
		{"equal ab", str("ab"), str("ab")},
		{"equal é", str("é"), str("é")},
		{"equal emoji", str("\U0001F600"), str("\U0001F600")},
		{"equal the longest", str(strings.Repeat("z", engine.MaxIndexStringBytes)), str(strings.Repeat("z", engine.MaxIndexStringBytes))},
		{"equal an absent value", str("nope"), str("nope")},
		{"empty: min above max", str("b"), str("a")},
	},
}

func rangeQuery(ix engine.IndexSpec, min, max bound, desc bool, limit int) engine.IndexQuery {
	return engine.IndexQuery{Index: ix.Name, Min: min.v, HasMin: min.set, Max: max.v, HasMax: max.set,
		Desc: desc, Limit: limit}
}

// indexTest checks index ix of a table of sh holding the documents of md.
type indexTest func(t *testing.T, tb engine.Table, md tmodel, sh shape, ix engine.IndexSpec)

// perIndex adapts fn to the suite: it opens a table of sh holding 80
// generated documents and runs fn on it as a sub-test for every index.
func perIndex(fn indexTest) func(*testing.T, TablesOpener, shape) {
	return func(t *testing.T, open TablesOpener, sh shape) {
		tb, md := seededTable(t, open, sh, 80)
		eachIndex(t, sh, func(t *testing.T, ix engine.IndexSpec) { fn(t, tb, md, sh, ix) })
	}
}

func testTableQueryOrder(t *testing.T, tb engine.Table, md tmodel, sh shape, ix engine.IndexSpec) {
	asc := wantTPage(t, tb, md, engine.IndexQuery{Index: ix.Name, Limit: 1000})
	desc := wantTPage(t, tb, md, engine.IndexQuery{Index: ix.Name, Limit: 1000, Desc: true})
	// Without TiesAscending a descending query is the exact reverse
	// (wantTPage checked the order of a TiesAscending table).
	rev := slices.Clone(desc.Docs)
	slices.Reverse(rev)
	if !sh.spec.TiesAscending && !slices.EqualFunc(asc.Docs, rev, sameKey) {
		t.Fatalf("descending %v is not the exact reverse of ascending %v",
			showKeys(desc.Docs), showKeys(asc.Docs))
	}
	pos, _, _ := sh.spec.Index(ix.Name)
	ties := 0
	for i := 1; i < len(asc.Docs); i++ {
		if sameValue(asc.Docs[i].Index[pos], asc.Docs[i-1].Index[pos]) {
			ties++
		}
	}
	if ties < 10 {
		t.Fatalf("test bug: only %d ties in index %s", ties, ix.Name)
	}
}

func testTableQueryBounds(t *testing.T, tb engine.Table, md tmodel, sh shape, ix engine.IndexSpec) {
	for _, tc := range boundCases[ix.Kind] {
		t.Run(tc.name, func(t *testing.T) {
			for _, desc := range []bool{false, true} {
				q := rangeQuery(ix, tc.min, tc.max, desc, 1000)
				pos, kind, _ := q.Validate(sh.spec)
				for _, d := range wantTPage(t, tb, md, q).Docs {
					if !q.InRange(d.Index[pos], kind) {
						t.Fatalf("%s: doc %s outside the range", showQuery(q), showDoc(d))
					}
				}
			}
		})
	}
}

func testTableQueryLimit(t *testing.T, tb engine.Table, md tmodel, _ shape, ix engine.IndexSpec) {
	for _, limit := range []int{1, 2, 5, 79, 80, 81, 1 << 30} {
		for _, desc := range []bool{false, true} {
			page := wantTPage(t, tb, md, engine.IndexQuery{Index: ix.Name, Desc: desc, Limit: limit})
			if (limit <= 80) != (page.Next != nil) {
				t.Fatalf("limit %d of 80 matches: Next = %s; want a cursor exactly when limit <= 80",
					limit, showCursor(page.Next))
			}
		}
	}
	// A limited range query stops within the range.
	for _, tc := range boundCases[ix.Kind] {
		for _, limit := range []int{1, 3} {
			wantTPage(t, tb, md, rangeQuery(ix, tc.min, tc.max, limit == 3, limit))
		}
	}
}

func testTableQueryPaging(t *testing.T, tb engine.Table, md tmodel, _ shape, ix engine.IndexSpec) {
	for _, c := range pagingCases[ix.Kind] {
		limits := []int{2, 5, 16}
		if c.min.set && c.max.set {
			limits = append(limits, 1) // short ranges page one by one too
		}
		for _, limit := range limits {
			for _, desc := range []bool{false, true} {
				tpageAll(t, tb, md, rangeQuery(ix, c.min, c.max, desc, limit))
			}
		}
	}
}

// pagingCases are the ranges paged through: all, min, max, closed, equal.
var pagingCases = map[engine.IndexKind][]boundCase{
	engine.IndexNumber: {
		{"everything", unbounded, unbounded},
		{"min zero", num(0), unbounded},
		{"max 2.5", unbounded, num(2.5)},
		{"closed", num(-2.5), num(7.5)},
		{"equal 2.5", num(2.5), num(2.5)},
	},
	engine.IndexString: {
		{"everything", unbounded, unbounded},
		{"min a", str("a"), unbounded},
		{"max gold", unbounded, str("gold")},
		{"closed", str("a"), str("b")},
		{"equal ab", str("ab"), str("ab")},
	},
}

// arbitraryCursors are positions that need not be any stored document's:
// inside, before and after tie groups, between values, beyond both ends.
var arbitraryCursors = map[engine.IndexKind][]engine.IndexCursor{
	engine.IndexNumber: {
		{Value: engine.Num(2.5)},
		{Value: engine.Num(2.5), Key: []byte{0x80}},
		{Value: engine.Num(2.5), Key: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{Value: engine.Num(7.5), Key: []byte("cust-1")},
		{Value: engine.Num(0), Key: []byte{0, 0, 0, 0, 0, 0, 0, 5}},
		{Value: engine.Num(negZero), Key: []byte("cust-3")},
		{Value: engine.Num(3), Key: []byte{0x01}},
		{Value: engine.Num(-1e301), Key: []byte("x")},
		{Value: engine.Num(math.Inf(-1))},
		{Value: engine.Num(math.Inf(1)), Key: []byte{0xff}},
		{Value: engine.Num(math.MaxFloat64), Key: []byte{0xff}},
		{Value: engine.Num(-math.MaxFloat64)},
	},
	engine.IndexString: {
		{Value: engine.Str("")},
		{Value: engine.Str(""), Key: []byte("cust-5")},
		{Value: engine.Str("ab"), Key: []byte("cust-")},
		{Value: engine.Str("ab"), Key: []byte("cust-99999")},
		{Value: engine.Str("aa"), Key: []byte("m")},
		{Value: engine.Str("gold"), Key: []byte{0xff}},
		{Value: engine.Str("\uffff"), Key: []byte("cust-1")},
		{Value: engine.Str("\U0001F600")},
		{Value: engine.Str("\U0010FFFF"), Key: []byte{0xff}},
	},
}

func testTableQueryAfterCursor(t *testing.T, tb engine.Table, md tmodel, sh shape, ix engine.IndexSpec) {
	cursors := slices.Clone(arbitraryCursors[ix.Kind])
	// Cursors of stored documents with a byte appended to the key: just
	// after the document, before the next key of the same value.
	pos, _, _ := sh.spec.Index(ix.Name)
	docs := md.query(t, sh.spec, engine.IndexQuery{Index: ix.Name, Limit: 1})
	for i := 0; i < len(docs); i += 20 {
		c := cursorAt(docs[i], pos)
		c.Key = append(bytes.Clone(c.Key), 0)
		cursors = append(cursors, c)
	}
	closed := pagingCases[ix.Kind][3]
	for _, c := range cursors {
		for _, desc := range []bool{false, true} {
			for _, q := range []engine.IndexQuery{{Index: ix.Name, Desc: desc, Limit: 5},
				{Index: ix.Name, Desc: desc, Limit: 1000}, rangeQuery(ix, closed.min, closed.max, desc, 1000)} {
				q.After = &c
				wantTPage(t, tb, md, q)
			}
		}
	}
}

func testTableQueryMoves(t *testing.T, open TablesOpener, sh shape) {
	_, tb := openTable(t, open, sh.spec)
	start := []engine.Doc{tdoc(sh, 1, 0, 1, 9, "gold"), tdoc(sh, 2, 0, 1, 8.5, "silver"), tdoc(sh, 3, 0, 1, 2, "bronze")}
	tapply(t, tb, 0, 1, start...)
	md := tmodelOf(start)
	moves := []engine.Doc{
		tdoc(sh, 1, 0, 2, 2, "bronze"),   // leaves the top, ties with 3
		tdoc(sh, 3, 0, 2, 9.5, "zinc"),   // becomes first
		tdoc(sh, 2, 0, 3, 8.5, "silver"), // same values, new version
		tdoc(sh, 2, 0, 4, negZero, ""),   // to -0 and the empty string
		tdoc(sh, 1, 0, 5, 0, "bronze"),   // ties with -0
	}
	if len(sh.spec.Indexes) > 1 {
		moves = append(moves, tdoc(sh, 3, 0, 6, 9.5, "aaa")) // moves one index only
	}
	for i, m := range moves {
		prev := md[string(m.Key)]
		tapply(t, tb, 0, int64(2+i), m)
		md[string(m.Key)] = m
		for pos, ix := range sh.spec.Indexes {
			for _, desc := range []bool{false, true} {
				wantTPage(t, tb, md, engine.IndexQuery{Index: ix.Name, Desc: desc, Limit: 10})
				// The new value finds the doc, the previous one no longer does.
				for _, v := range []engine.IndexValue{m.Index[pos], prev.Index[pos]} {
					wantTPage(t, tb, md, rangeQuery(ix, bound{true, v}, bound{true, v}, desc, 10))
				}
				// Each of the 3 docs once.
				tpageAll(t, tb, md, engine.IndexQuery{Index: ix.Name, Desc: desc, Limit: 1})
			}
		}
	}
}

func testTableQueryInvalid(t *testing.T, open TablesOpener, sh shape) {
	tb, _ := seededTable(t, open, sh, 5)
	first := sh.spec.Indexes[0].Name
	nan := &engine.IndexCursor{Value: engine.Num(math.NaN()), Key: sh.key(1)}
	cases := []struct {
		name string
		q    engine.IndexQuery
	}{
		{"unknown index", engine.IndexQuery{Index: "nope", Limit: 5}},
		{"no index", engine.IndexQuery{Limit: 5}},
		{"index of another table", engine.IndexQuery{Index: "region", Limit: 5}},
		{"index name in upper case", engine.IndexQuery{Index: strings.ToUpper(first), Limit: 5}},
		{"zero limit", engine.IndexQuery{Index: first, Limit: 0}},
		{"negative limit", engine.IndexQuery{Index: first, Limit: -1}},
		{"NaN min", engine.IndexQuery{Index: first, Limit: 5, Min: engine.Num(math.NaN()), HasMin: true}},
		{"NaN max", engine.IndexQuery{Index: first, Limit: 5, Max: engine.Num(math.NaN()), HasMax: true}},
		{"NaN cursor", engine.IndexQuery{Index: first, Limit: 5, After: nan}},
	}
	if sh.spec.Indexes[0].Kind != engine.IndexNumber {
		cases = cases[:len(cases)-3] // NaN bounds are numbers' only
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := tc.q.Validate(sh.spec); err == nil {
				t.Fatalf("test bug: %s is valid", showQuery(tc.q))
			}
			page, err := tb.Query(ctx(t), tc.q)
			if !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("Query(%s) = %d docs, %v; want ErrInvalid", showQuery(tc.q), len(page.Docs), err)
			}
		})
	}
}

// testTableTiesAscending checks a table whose spec sets TiesAscending:
// descending queries order equal values by key ascending.
func testTableTiesAscending(t *testing.T, open TablesOpener) {
	spec := engine.TableSpec{Name: "ranked", Indexes: cloneSpec(OrderShape).Indexes, TiesAscending: true, Partitions: Partitions}
	sh := shape{name: "ranked", spec: spec, key: customerKey}
	_, tb := openTable(t, open, spec)
	md := seedTable(t, tb, sh, 3, 60, 1) // spread, so that a store merging partitions merges ties
	if got := tb.Spec(); !got.TiesAscending {
		t.Fatalf("Spec() = %+v; want TiesAscending", got)
	}
	wantTQueries(t, tb, md, sh, []int{4, 100}, 6, 3)
	if _, ok := tb.(engine.FilteredQuerier); ok {
		t.Run("filtered", func(t *testing.T) { checkFiltered(t, tb, md, sh) })
	}
}

// wantTQueries checks every index of sh, both ways, against the model:
// paging through it with each limit of pages, from each arbitrary cursor
// (atCursor documents a page) and in each bound case (inBounds a page).
func wantTQueries(t *testing.T, tb engine.Table, md tmodel, sh shape, pages []int, atCursor, inBounds int) {
	t.Helper()
	eachIndex(t, sh, func(t *testing.T, ix engine.IndexSpec) {
		for _, desc := range []bool{false, true} {
			for _, limit := range pages {
				tpageAll(t, tb, md, engine.IndexQuery{Index: ix.Name, Desc: desc, Limit: limit})
			}
			for _, c := range arbitraryCursors[ix.Kind] {
				wantTPage(t, tb, md, engine.IndexQuery{Index: ix.Name, Desc: desc, Limit: atCursor, After: &c})
			}
			for _, bc := range boundCases[ix.Kind] {
				wantTPage(t, tb, md, rangeQuery(ix, bc.min, bc.max, desc, inBounds))
			}
		}
	})
}
