package docstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/storetest"
)

// openTables opens a store in a fresh directory for the table suite,
// closed at the end of the (sub-)test.
func openTables(t *testing.T, opts ...Option) engine.Tables {
	s := openTemp(t, opts...)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestTablesConformance(t *testing.T) {
	storetest.RunTables(t, func(t *testing.T) engine.Tables { return openTables(t, WithFsync(false)) })
}

func TestTablesConformanceFsync(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	storetest.RunTables(t, func(t *testing.T) engine.Tables { return openTables(t) })
}

// ordersSpec is the table most tests use: string keys, a number and a
// string index.
var ordersSpec = engine.TableSpec{Name: "orders", Indexes: []engine.IndexSpec{
	{Name: "total", Kind: engine.IndexNumber}, {Name: "tier", Kind: engine.IndexString}}}

var tiers = []string{"", "bronze", "gold", "gold plus", "silver", "z\x01", "é"}

// orderDoc is document i of ordersSpec at version: totals on a 0.25 grid
// in [-50, 200) (many ties, negatives, -0 for i = 200), tiers from tiers.
func orderDoc(i int, p int32, version int64) engine.Doc {
	total := float64((i*37+int(version)*11)%1000)/4 - 50
	if total == 0 {
		total = math.Copysign(0, -1)
	}
	return engine.Doc{Key: fmt.Appendf(nil, "cust-%06d", i), Partition: p, Version: version,
		Sources: map[int32]int64{p: version}, Value: fmt.Appendf(nil, `{"n":%d,"v":%d}`, i, version),
		Index: []engine.IndexValue{engine.Num(total), engine.Str(tiers[(i+int(version))%len(tiers)])}}
}

// mustTable opens the table of spec in s.
func mustTable(tb testing.TB, s *Store, spec engine.TableSpec) *table {
	tb.Helper()
	t, err := s.OpenTable(context.Background(), spec)
	if err != nil {
		tb.Fatalf("OpenTable(%s): %v", spec.Name, err)
	}
	return t.(*table)
}

// applyDocs claims p and applies docs in one batch with checkpoint next.
func applyDocs(tb testing.TB, t engine.Table, p int32, next int64, docs ...engine.Doc) {
	tb.Helper()
	ctx := context.Background()
	epoch, err := t.Claim(ctx, p)
	if err != nil {
		tb.Fatal(err)
	}
	if err := t.Apply(ctx, engine.DocBatch{Partition: p, Epoch: epoch, Docs: docs, Checkpoint: next}); err != nil {
		tb.Fatalf("Apply(partition %d, %d docs): %v", p, len(docs), err)
	}
}

// fillTable writes orders 0..n-1 at version 1 into partition 0, batch
// documents per Apply.
func fillTable(tb testing.TB, t engine.Table, n, batch int) {
	tb.Helper()
	ctx := context.Background()
	epoch, err := t.Claim(ctx, 0)
	if err != nil {
		tb.Fatal(err)
	}
	docs := make([]engine.Doc, 0, batch)
	for i := range n {
		docs = append(docs, orderDoc(i, 0, 1))
		if len(docs) == batch || i == n-1 {
			if err := t.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: int64(i + 1)}); err != nil {
				tb.Fatalf("fill batch ending at %d: %v", i, err)
			}
			docs = docs[:0]
		}
	}
}

// tableState is what the engine holds for one table, counted key by key.
type tableState struct {
	docs, members, size int
	entries             []int // per index
}

// rawTableState counts the table's documents, members keys and index
// entries, and reads its collection size, and checks that they agree:
// one members key and one entry per index for each document.
func rawTableState(s *Store, t *table) (tableState, error) {
	st := tableState{entries: make([]int, len(t.spec.Indexes))}
	count := func(r kvReader, prefix []byte) (int, error) {
		it, err := r.iter(prefix, prefixUpper(prefix), false)
		if err != nil {
			return 0, err
		}
		defer it.close()
		n := 0
		for ok := it.seek(prefix); ok; ok = it.next() {
			n++
		}
		return n, nil
	}
	err := s.tableRead(context.Background(), func(r kvReader) error {
		var err error
		if st.docs, err = count(r, t.l.docs); err != nil {
			return err
		}
		if st.members, err = count(r, t.l.family(tabMembers)); err != nil {
			return err
		}
		for pos := range t.spec.Indexes {
			if st.entries[pos], err = count(r, t.l.indexPrefix(pos)); err != nil {
				return err
			}
		}
		raw, err := r.get(t.l.collKey)
		if err != nil {
			return err
		}
		var meta struct{ Size int }
		if err := json.Unmarshal(raw, &meta); err != nil {
			return fmt.Errorf("collection metadata %q: %w", raw, err)
		}
		st.size = meta.Size
		return nil
	})
	if err != nil {
		return st, err
	}
	for pos, n := range st.entries {
		if n != st.docs {
			return st, fmt.Errorf("index %s has %d entries for %d documents", t.spec.Indexes[pos].Name, n, st.docs)
		}
	}
	if st.members != st.docs || st.size != st.docs {
		return st, fmt.Errorf("%d documents, %d members keys, collection size %d; want all equal", st.docs, st.members, st.size)
	}
	return st, nil
}

// wantTableDocs checks that t holds exactly want (Get, Load, every index
// in both orders against a sort with TableSpec.Before) and that its keys
// agree (rawTableState).
func wantTableDocs(tb testing.TB, s *Store, t *table, want []engine.Doc) {
	tb.Helper()
	ctx := context.Background()
	st, err := rawTableState(s, t)
	if err != nil {
		tb.Fatal(err)
	}
	if st.docs != len(want) {
		tb.Fatalf("table %s holds %d documents; want %d", t.spec.Name, st.docs, len(want))
	}
	keys := make([][]byte, len(want))
	for i, d := range want {
		keys[i] = d.Key
	}
	got, err := t.Load(ctx, keys)
	if err != nil {
		tb.Fatal(err)
	}
	for _, d := range want {
		if g, ok := got[string(d.Key)]; !ok || !sameTableDoc(g, d) {
			tb.Fatalf("Load(%q) = %+v, %v; want %+v", d.Key, g, ok, d)
		}
	}
	for pos, ix := range t.spec.Indexes {
		for _, desc := range []bool{false, true} {
			ordered := slices.Clone(want)
			slices.SortFunc(ordered, func(a, b engine.Doc) int {
				ca, cb := engine.IndexCursor{Value: a.Index[pos], Key: a.Key}, engine.IndexCursor{Value: b.Index[pos], Key: b.Key}
				if t.spec.Before(ca, cb, ix.Kind, desc) {
					return -1
				}
				return 1
			})
			var paged []engine.Doc
			q := engine.IndexQuery{Index: ix.Name, Desc: desc, Limit: 7}
			for {
				page, err := t.Query(ctx, q)
				if err != nil {
					tb.Fatal(err)
				}
				paged = append(paged, page.Docs...)
				if page.Next == nil {
					break
				}
				q.After = page.Next
			}
			if len(paged) != len(ordered) {
				tb.Fatalf("index %s desc=%v pages %d documents; want %d", ix.Name, desc, len(paged), len(ordered))
			}
			for i := range ordered {
				if !sameTableDoc(paged[i], ordered[i]) {
					tb.Fatalf("index %s desc=%v position %d: %q; want %q", ix.Name, desc, i, paged[i].Key, ordered[i].Key)
				}
			}
		}
	}
}

// sameTableDoc compares documents field by field (numbers with ==).
func sameTableDoc(a, b engine.Doc) bool {
	if !bytes.Equal(a.Key, b.Key) || a.Partition != b.Partition || a.Version != b.Version ||
		!bytes.Equal(a.Value, b.Value) || len(a.Index) != len(b.Index) || len(a.Sources) != len(b.Sources) {
		return false
	}
	for i := range a.Index {
		if a.Index[i] != b.Index[i] && !(a.Index[i].Num == b.Index[i].Num && a.Index[i].Str == b.Index[i].Str) {
			return false
		}
	}
	for p, o := range a.Sources {
		if b.Sources[p] != o {
			return false
		}
	}
	return true
}

// TestTableKeysAndValuesOfAnyBytes stores keys with 0x00, 0xff and
// prefixes of each other, and string values that prefix each other and
// hold control bytes: every index order is (value, key bytes), exactly
// reversed when descending, and bounds holding a 0x00 select what Go's
// string order says.
func TestTableKeysAndValuesOfAnyBytes(t *testing.T) {
	s := openTemp(t, WithFsync(false))
	defer s.Close()
	tb := mustTable(t, s, ordersSpec)
	keys := [][]byte{{0}, {0, 0}, {0, 1}, {1}, {0xff}, {0xff, 0}, {0xff, 0xff}, []byte("a"), []byte("a\x00"), []byte("a\x00b"),
		[]byte("ab"), bytes.Repeat([]byte{0xff}, engine.MaxKeyBytes-2), bytes.Repeat([]byte{0}, engine.MaxKeyBytes-2)}
	values := []string{"", "\x01", "a", "a\x01", "ab", "a b", "b", "\xc3\xa9", "\U0010FFFF"}
	var docs []engine.Doc
	for i, k := range keys {
		for j := range 3 {
			key := append(slices.Clone(k), 0x80, byte(j))
			if j == 0 {
				key = k
			}
			v := values[(i+j)%len(values)]
			docs = append(docs, engine.Doc{Key: key, Version: 1, Value: []byte{byte(i)},
				Index: []engine.IndexValue{engine.Num(float64(j - 1)), engine.Str(v)}})
		}
	}
	applyDocs(t, tb, 0, 1, docs...)
	wantTableDocs(t, s, tb, docs)

	cases := []struct {
		name     string
		min, max string
		hasMin   bool
		hasMax   bool
	}{
		{"min with NUL", "a\x00", "", true, false},
		{"max with NUL", "", "a\x00zz", false, true},
		{"both with NUL", "\x00", "a\x00", true, true},
		{"equal a", "a", "a", true, true},
		{"prefix range", "a", "a\x01", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, desc := range []bool{false, true} {
				q := engine.IndexQuery{Index: "tier", Min: engine.Str(tc.min), Max: engine.Str(tc.max),
					HasMin: tc.hasMin, HasMax: tc.hasMax, Desc: desc, Limit: 1000}
				page, err := tb.Query(context.Background(), q)
				if err != nil {
					t.Fatal(err)
				}
				want := 0
				for _, d := range docs {
					if q.InRange(d.Index[1], engine.IndexString) {
						want++
					}
				}
				if len(page.Docs) != want {
					t.Fatalf("desc=%v: %d documents; want %d", desc, len(page.Docs), want)
				}
				for _, d := range page.Docs {
					if !q.InRange(d.Index[1], engine.IndexString) {
						t.Fatalf("desc=%v: %q (tier %q) is out of range", desc, d.Key, d.Index[1].Str)
					}
				}
			}
		})
	}
}

// TestTableMovesAcrossPartitions moves a key to another partition: the
// old partition's drop and scan leave it alone, the new one's remove it.
func TestTableMovesAcrossPartitions(t *testing.T) {
	s := openTemp(t, WithFsync(false))
	defer s.Close()
	ctx := context.Background()
	tb := mustTable(t, s, ordersSpec)
	applyDocs(t, tb, 0, 1, orderDoc(7, 0, 1), orderDoc(8, 0, 1))
	moved := orderDoc(7, 1, 2)
	applyDocs(t, tb, 1, 1, moved)
	count := func(p int32) int {
		n := 0
		if err := tb.ScanPartition(ctx, p, func(engine.Doc) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if c0, c1 := count(0), count(1); c0 != 1 || c1 != 1 {
		t.Fatalf("after the move: partition 0 has %d docs, partition 1 has %d; want 1 and 1", c0, c1)
	}
	wantTableDocs(t, s, tb, []engine.Doc{orderDoc(8, 0, 1), moved})
	if err := tb.DropPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	wantTableDocs(t, s, tb, []engine.Doc{moved})
	if err := tb.DropPartition(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wantTableDocs(t, s, tb, nil)
	if _, err := tb.Get(ctx, moved.Key); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Get after dropping its partition = %v; want ErrNotFound", err)
	}
}

func TestTablesConformanceWithoutWriteCache(t *testing.T) {
	storetest.RunTables(t, func(t *testing.T) engine.Tables { return openTables(t, WithFsync(false), WithWriteCache(0)) })
}

// TestTableWriteCache checks the tables' write cache: a key written (or
// read) once is written again without reading its document; every handle
// of a table shares it, so a version fence holds across handles; a drop and
// a reset forget their keys; the bound holds across tables.
func TestTableWriteCache(t *testing.T) {
	ctx := context.Background()
	t.Run("writes skip reads", func(t *testing.T) {
		s := openTemp(t, WithFsync(false))
		defer s.Close()
		tb := mustTable(t, s, ordersSpec)
		var docs []engine.Doc
		for i := range 50 {
			docs = append(docs, orderDoc(i, 0, 1))
		}
		applyDocs(t, tb, 0, 1, docs...)
		s.counts.writeReads.Store(0)
		for i := range docs {
			docs[i] = orderDoc(i, 0, 2)
		}
		applyDocs(t, tb, 0, 2, docs...)
		if got := s.counts.writeReads.Load(); got != 0 {
			t.Fatalf("rewriting 50 cached keys read %d documents; want 0", got)
		}
		wantTableDocs(t, s, tb, docs)
	})
	t.Run("handles share it", func(t *testing.T) {
		s := openTemp(t, WithFsync(false))
		defer s.Close()
		first, second := mustTable(t, s, ordersSpec), mustTable(t, s, ordersSpec)
		applyDocs(t, first, 0, 1, orderDoc(1, 0, 5))
		epoch, err := second.Claim(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = second.Apply(ctx, engine.DocBatch{Epoch: epoch, Docs: []engine.Doc{orderDoc(1, 0, 4)}, Checkpoint: 2})
		if !errors.Is(err, engine.ErrFenced) {
			t.Fatalf("Apply of version 4 through a second handle after version 5 = %v; want ErrFenced", err)
		}
	})
	for _, forget := range []struct {
		name string
		fn   func(tb *table) error
	}{
		{"drop forgets", func(tb *table) error { return tb.DropPartition(ctx, 0) }},
		{"reset forgets", func(tb *table) error { return tb.Reset(ctx) }},
	} {
		t.Run(forget.name, func(t *testing.T) {
			s := openTemp(t, WithFsync(false))
			defer s.Close()
			tb := mustTable(t, s, ordersSpec)
			applyDocs(t, tb, 0, 1, orderDoc(1, 0, 5), orderDoc(2, 0, 5))
			if err := forget.fn(tb); err != nil {
				t.Fatal(err)
			}
			// Version 1 again: the documents are gone, so it is new.
			applyDocs(t, tb, 0, 1, orderDoc(1, 0, 1))
			wantTableDocs(t, s, tb, []engine.Doc{orderDoc(1, 0, 1)})
		})
	}
	t.Run("bounded across tables", func(t *testing.T) {
		s := openTemp(t, WithFsync(false), WithWriteCache(30))
		defer s.Close()
		a := mustTable(t, s, ordersSpec)
		b := mustTable(t, s, engine.TableSpec{Name: "other", Indexes: ordersSpec.Indexes})
		// The warm-ups of the empty tables: a late one would add b's
		// evicted keys back once a's reset frees room (they are b's
		// documents, so that is right, but not what this counts).
		<-a.cache.warmed
		<-b.cache.warmed
		var docs []engine.Doc
		for i := range 20 {
			docs = append(docs, orderDoc(i, 0, 1))
		}
		applyDocs(t, a, 0, 1, docs...)
		applyDocs(t, b, 0, 1, docs...)
		s.wmu.Lock()
		got, inB := s.tcache.n, s.tcache.of("other").m.len()
		s.wmu.Unlock()
		// b's keys beyond the bound evict b's own entries (an eighth at a
		// time), so the caches stay within 30 and a keeps its 20.
		if got > 30 || got < 30-30/8 || got != 20+inB {
			t.Fatalf("write cache holds %d keys (%d of the second table); want at most its bound, 30, with the first table's 20", got, inB)
		}
		if err := a.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		s.wmu.Lock()
		got = s.tcache.n
		s.wmu.Unlock()
		if got != inB {
			t.Fatalf("write cache holds %d keys after a reset of the table holding 20; want the other table's %d", got, inB)
		}
	})
}

// TestTableIsInstanceLocal: a table's documents are this instance's, so the
// engine must route queries for partitions it does not run (a table that
// claimed to be shared would answer them from stale or missing copies).
func TestTableIsInstanceLocal(t *testing.T) {
	tb, err := openTables(t).OpenTable(context.Background(), storetest.OrderShape)
	if err != nil {
		t.Fatalf("OpenTable: %v", err)
	}
	l, ok := tb.(engine.InstanceLocal)
	if !ok || !l.InstanceLocal() {
		t.Errorf("table InstanceLocal: got ok=%v, want a table reporting true", ok)
	}
}
