package storetest

import (
	"bytes"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// negZero is -0, which must sort and match as 0.
var negZero = math.Copysign(0, -1)

// numPool holds the number index values of generated documents: extremes,
// both zeros, denormals, fractions and the edge of float64's exact integers.
// Few values, so ties are common.
var numPool = []float64{-math.MaxFloat64, -1e300, -(1 << 53), -2.5, -1, -5e-324, negZero, 0,
	5e-324, 0.1, 1.0 / 3, 2.5, 7.5, 1 << 53, 1e300, math.MaxFloat64}

// strPool holds the string index values of generated documents: the empty
// string, case, prefixes, a control byte, multi-byte UTF-8 whose byte order
// differs from UTF-16 order (U+FFFF sorts before U+1F600), and a value of
// the maximum length.
var strPool = []string{"", " ", "A", "Z", "a", "a ", "ab", "abc", "b", "gold", "silver", "z\x01",
	"é", "\u00ff", "\uffff", "\U0001F600", strings.Repeat("z", engine.MaxIndexStringBytes)}

// tmodel is the brute-force reference for index queries: every document by
// string(key), filtered and sorted with TableSpec.Before on each query.
type tmodel map[string]engine.Doc

func tmodelOf(docs []engine.Doc) tmodel {
	md := tmodel{}
	for _, d := range docs {
		md[string(d.Key)] = d
	}
	return md
}

func (md tmodel) sorted() []engine.Doc {
	return slices.SortedFunc(maps.Values(md), func(a, b engine.Doc) int { return bytes.Compare(a.Key, b.Key) })
}

func cursorAt(d engine.Doc, pos int) engine.IndexCursor {
	return engine.IndexCursor{Value: d.Index[pos], Key: d.Key}
}

// query returns every document matching q's bounds and cursor, in q's order, ignoring the limit.
func (md tmodel) query(t *testing.T, spec engine.TableSpec, q engine.IndexQuery) []engine.Doc {
	t.Helper()
	pos, kind, err := q.Validate(spec)
	if err != nil {
		t.Fatalf("model query %+v: %v", q, err)
	}
	out := slices.DeleteFunc(slices.Collect(maps.Values(md)), func(d engine.Doc) bool {
		return !q.InRange(d.Index[pos], kind) ||
			q.After != nil && !spec.Before(*q.After, cursorAt(d, pos), kind, q.Desc)
	})
	slices.SortFunc(out, spec.DocOrder(pos, kind, q.Desc))
	return out
}

// tableData returns n documents of sh in partition p with many ties: index
// values from the pools, keys from a range around p*1_000_000 (so partitions
// never share a key; negative movie ids encode with the high bit set).
func tableData(sh shape, seed uint64, n int, p int32) []engine.Doc {
	r := rand.New(rand.NewPCG(seed, 7))
	seen := map[int]bool{}
	var docs []engine.Doc
	for len(docs) < n {
		i := r.IntN(4*n) - n
		if seen[i] {
			continue
		}
		seen[i] = true
		d := tdoc(sh, i+int(p)*1_000_000, p, int64(len(docs)+1), 0, "")
		d.Index = randIndex(r, sh.spec, false)
		docs = append(docs, d)
	}
	return docs
}

// randIndex returns random index values for spec from the pools or, if wide, sometimes anywhere.
func randIndex(r *rand.Rand, spec engine.TableSpec, wide bool) []engine.IndexValue {
	out := make([]engine.IndexValue, len(spec.Indexes))
	for i, ix := range spec.Indexes {
		out[i] = randValue(r, ix.Kind, wide)
	}
	return out
}

func randValue(r *rand.Rand, kind engine.IndexKind, wide bool) engine.IndexValue {
	if kind == engine.IndexNumber {
		if wide && r.IntN(3) == 0 {
			return engine.Num(math.Round(r.NormFloat64()*1000) / 8)
		}
		return engine.Num(numPool[r.IntN(len(numPool))])
	}
	if wide && r.IntN(3) == 0 {
		runes := []rune("aAb é\U0001F600\uffff~")
		var b strings.Builder
		for range r.IntN(4) {
			b.WriteRune(runes[r.IntN(len(runes))])
		}
		return engine.Str(b.String())
	}
	return engine.Str(strPool[r.IntN(len(strPool))])
}

// seededTable opens a table of sh holding n generated documents (seedTable).
func seededTable(t *testing.T, open TablesOpener, sh shape, n int) (engine.Table, tmodel) {
	t.Helper()
	_, tb := openTable(t, open, sh.spec)
	return tb, seedTable(t, tb, sh, uint64(n), n, int64(n))
}

// seedTable applies n documents generated from seed over partitions 0-2 (so
// a store keeping each partition's index apart merges them), returning their model.
func seedTable(t *testing.T, tb engine.Table, sh shape, seed uint64, n int, checkpoint int64) tmodel {
	t.Helper()
	var all []engine.Doc
	for p := range int32(3) {
		docs := tableData(sh, seed+uint64(p), (n+2-int(p))/3, p)
		if len(docs) > 0 {
			tapply(t, tb, p, checkpoint, docs...)
		}
		all = append(all, docs...)
	}
	return tmodelOf(all)
}

// wantTPage runs q and compares the page with the model's first q.Limit
// answers; Next must be the last document's cursor exactly when it is full.
func wantTPage(t *testing.T, tb engine.Table, md tmodel, q engine.IndexQuery) engine.DocPage {
	t.Helper()
	spec := tb.Spec()
	page, err := tb.Query(ctx(t), q)
	if err != nil {
		t.Fatalf("Query(%s): %v", showQuery(q), err)
	}
	want := md.query(t, spec, q)
	want = want[:min(len(want), q.Limit)]
	if len(page.Docs) != len(want) {
		t.Fatalf("Query(%s) returned %d docs %v; want %d %v",
			showQuery(q), len(page.Docs), showKeys(page.Docs), len(want), showKeys(want))
	}
	for i := range want {
		if !sameDoc(spec, page.Docs[i], want[i]) {
			t.Fatalf("Query(%s)[%d] = %s; want %s (all: %v; want %v)", showQuery(q), i,
				showDoc(page.Docs[i]), showDoc(want[i]), showKeys(page.Docs), showKeys(want))
		}
	}
	var next *engine.IndexCursor // the last document's cursor when the page is full
	if pos, _, _ := q.Validate(spec); len(want) == q.Limit {
		c := cursorAt(want[len(want)-1], pos)
		next = &c
	}
	if (page.Next == nil) != (next == nil) ||
		next != nil && (!sameValue(page.Next.Value, next.Value) || !bytes.Equal(page.Next.Key, next.Key)) {
		t.Fatalf("Query(%s) returned %d docs (limit %d) with Next %s; want %s",
			showQuery(q), len(page.Docs), q.Limit, showCursor(page.Next), showCursor(next))
	}
	return page
}

// wantTIndexes checks the first limit documents of every index of sh, in each order of descs.
func wantTIndexes(t *testing.T, tb engine.Table, sh shape, md tmodel, limit int, descs ...bool) {
	t.Helper()
	for _, ix := range sh.spec.Indexes {
		for _, desc := range descs {
			wantTPage(t, tb, md, engine.IndexQuery{Index: ix.Name, Desc: desc, Limit: limit})
		}
	}
}

// wantTPagedAll runs tpageAll on every index of sh both ways, limit documents a page.
func wantTPagedAll(t *testing.T, tb engine.Table, sh shape, md tmodel, limit int) {
	t.Helper()
	for _, ix := range sh.spec.Indexes {
		for _, desc := range []bool{false, true} {
			tpageAll(t, tb, md, engine.IndexQuery{Index: ix.Name, Desc: desc, Limit: limit})
		}
	}
}

// tpageAll follows Next from q until a page comes back without it,
// checking each page against the model and that the pages together hold
// the model's answer to q: every document once, in order.
func tpageAll(t *testing.T, tb engine.Table, md tmodel, q engine.IndexQuery) {
	t.Helper()
	want := md.query(t, tb.Spec(), q)
	var got []engine.Doc
	for at, pages := q, 0; ; pages++ {
		if pages > len(md)/q.Limit+2 {
			t.Fatalf("paging %s did not end after %d pages", showQuery(q), pages)
		}
		page := wantTPage(t, tb, md, at)
		got = append(got, page.Docs...)
		if page.Next == nil {
			break
		}
		next := *page.Next
		at.After = &next
	}
	if !slices.EqualFunc(got, want, sameKey) {
		t.Fatalf("paging %s returned %d docs %v; want %d %v",
			showQuery(q), len(got), showKeys(got), len(want), showKeys(want))
	}
}

func showQuery(q engine.IndexQuery) string {
	s := q.Index
	if q.HasMin {
		s += " min " + showValue(q.Min)
	}
	if q.HasMax {
		s += " max " + showValue(q.Max)
	}
	if q.Desc {
		s += " desc"
	}
	s += " limit " + strconv.Itoa(q.Limit)
	if q.After != nil {
		s += " after " + showCursor(q.After)
	}
	return s
}

func showCursor(c *engine.IndexCursor) string {
	if c == nil {
		return "nil"
	}
	return "(" + showValue(c.Value) + ", " + showKey(c.Key) + ")"
}
