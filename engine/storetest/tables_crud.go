package storetest

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

func testTableRoundTrip(t *testing.T, open TablesOpener, sh shape) {
	_, tb := openTable(t, open, sh.spec)
	binary := make([]byte, 4096)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	long := strings.Repeat("é", engine.MaxIndexStringBytes/2)
	doc := func(i int, version int64, sources map[int32]int64, value string, n float64, s string) engine.Doc {
		return engine.Doc{Key: sh.keyIn(i, 0), Version: version, Sources: sources, Value: []byte(value),
			Index: index(sh.spec, n, s)}
	}
	nilValue := doc(2, 0, nil, "", 0, "")
	nilValue.Value = nil
	longKey := doc(0, 8, nil, "long key", 2.5, "b")
	longKey.Key = findKey(0, func(m int) []byte {
		k := sh.key(9 + m<<36)
		return bytes.Repeat(k, engine.MaxKeyBytes/len(k)+1)[:engine.MaxKeyBytes]
	})
	cases := []struct {
		name string
		doc  engine.Doc
	}{
		{"plain", doc(362, 7, map[int32]int64{0: 11}, `{"count":2,"sum":18}`, 9, "gold")},
		{"many sources", doc(1, 1<<40, map[int32]int64{0: 3, 1: 1 << 50, 2: 0, 17: 99,
			math.MaxInt32: math.MaxInt64}, "x", 0.1+0.2, "silver")},
		{"nil sources and nil value", nilValue},
		{"empty sources and empty value", doc(3, 1, map[int32]int64{}, "", 1.0/3, " ")},
		{"binary value", doc(4, 2, map[int32]int64{3: 4}, string(binary), -2.5, "z\x01")},
		{"largest numbers and longest string",
			doc(5, math.MaxInt64-1, map[int32]int64{0: 1}, "big", math.MaxFloat64, long)},
		{"most negative number", doc(-6, 3, map[int32]int64{0: 1}, "neg", -math.MaxFloat64, "\U0001F600")},
		{"smallest denormal", doc(-7, 4, map[int32]int64{0: 2}, "tiny", 5e-324, "\uffff")},
		{"integer beyond 2^53", doc(8, 5, map[int32]int64{0: 2}, "int", 1<<60, "Z")},
		{"key 0", doc(0, 6, nil, "zero", 7.5, "a")},
		{"longest key", longKey},
	}
	var docs []engine.Doc
	for _, tc := range cases {
		docs = append(docs, tc.doc)
	}
	tapply(t, tb, 0, 100, docs...)
	wantTCheckpoint(t, tb, 0, 100, true)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantTDoc(t, tb, tc.doc) })
	}

	t.Run("negative zero", func(t *testing.T) {
		d := doc(10, 9, nil, "-0", negZero, "")
		tapply(t, tb, 0, 101, d)
		got, err := tb.Get(ctx(t), d.Key)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		for i, ix := range sh.spec.Indexes {
			if ix.Kind == engine.IndexNumber && got.Index[i].Num != 0 {
				t.Fatalf("index %s of a doc stored with -0 = %v; want 0 or -0", ix.Name, got.Index[i].Num)
			}
		}
		docs = append(docs, d)
	})

	t.Run("other partition", func(t *testing.T) {
		last := Partitions - 1
		d := tdoc(sh, 11, last, 1, 5, "gold")
		tapply(t, tb, last, 3, d)
		wantTDoc(t, tb, d)
		wantTCheckpoint(t, tb, last, 3, true)
		wantTCheckpoint(t, tb, 0, 101, true)
		docs = append(docs, d)
	})

	t.Run("Load", func(t *testing.T) {
		wantTLoad(t, tb, append([][]byte{sh.key(99999)}, docKeys(docs)...), tmodelOf(docs))
	})

	t.Run("every doc is in every index", func(t *testing.T) {
		wantTIndexes(t, tb, sh, tmodelOf(docs), len(docs)+1, false, true)
	})

	t.Run("overwrite with newer version", func(t *testing.T) {
		upd := docs[0].Clone()
		upd.Version++
		upd.Sources[5] = 6
		upd.Value = []byte("updated")
		upd.Index = index(sh.spec, -1, "silver")
		tapply(t, tb, 0, 102, upd)
		wantTDoc(t, tb, upd)
		wantTCheckpoint(t, tb, 0, 102, true)
	})
}

// testTableCopies checks that documents handed to Apply and returned by
// Get, Load and Query are not shared with the store.
func testTableCopies(t *testing.T, open TablesOpener, sh shape) {
	_, tb := openTable(t, open, sh.spec)
	orig := tdoc(sh, 1, 0, 3, 2.5, "gold")
	in := orig.Clone()
	tapply(t, tb, 0, 1, in)
	scribble := func(d *engine.Doc) {
		if len(d.Key) > 0 {
			d.Key[0] ^= 0xff
		}
		if len(d.Value) > 0 {
			d.Value[0] ^= 0xff
		}
		if d.Sources != nil {
			d.Sources[0] = -1
			d.Sources[99] = 99
		}
		if len(d.Index) > 0 {
			d.Index[0] = engine.IndexValue{Num: 1234, Str: "scribbled"}
		}
	}
	scribble(&in)
	wantTDoc(t, tb, orig)
	got, err := tb.Get(ctx(t), orig.Key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	scribble(&got)
	wantTDoc(t, tb, orig)
	loaded, err := tb.Load(ctx(t), [][]byte{orig.Key})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	for _, d := range loaded {
		scribble(&d)
	}
	wantTDoc(t, tb, orig)
	page, err := tb.Query(ctx(t), engine.IndexQuery{Index: sh.spec.Indexes[0].Name, Limit: 1})
	if err != nil || len(page.Docs) != 1 {
		t.Fatalf("Query = %v, %v; want one doc", showKeys(page.Docs), err)
	}
	scribble(&page.Docs[0])
	if page.Next != nil && len(page.Next.Key) > 0 {
		page.Next.Key[0] ^= 0xff
	}
	wantTDoc(t, tb, orig)
	wantTPage(t, tb, tmodelOf([]engine.Doc{orig}), engine.IndexQuery{Index: sh.spec.Indexes[0].Name, Limit: 5})
}

func testTableLoadMissing(t *testing.T, open TablesOpener, sh shape) {
	_, tb := openTable(t, open, sh.spec)
	for _, keys := range [][][]byte{nil, {}, {sh.key(1)}, {sh.key(1), sh.key(2), sh.key(-3)}} {
		wantTLoad(t, tb, keys, tmodel{}) // an empty table
	}
	d := tdoc(sh, 1, 0, 1, 5, "gold")
	tapply(t, tb, 0, 1, d)
	wantTLoad(t, tb, [][]byte{sh.keyIn(2, 0), d.Key, sh.keyIn(3, 0), d.Key}, tmodelOf([]engine.Doc{d}))
}

func testTableGetMissing(t *testing.T, open TablesOpener, sh shape) {
	_, tb := openTable(t, open, sh.spec)
	wantTAbsent(t, tb, sh.key(1))
	d := tdoc(sh, 1, 0, 1, 5, "gold")
	tapply(t, tb, 0, 1, d)
	k := d.Key
	wantTAbsent(t, tb, sh.key(0), sh.key(2), sh.key(-1), k[:len(k)-1], append(bytes.Clone(k), 0), []byte{0xff})
	wantTDoc(t, tb, d)
}

func testTableCheckpointMissing(t *testing.T, open TablesOpener, sh shape) {
	_, tb := openTable(t, open, sh.spec)
	wantTCheckpoint(t, tb, 0, 0, false)
	wantTCheckpoint(t, tb, 7, 0, false)
	// A batch without documents still moves the checkpoint.
	tapply(t, tb, 3, 42)
	wantTCheckpoint(t, tb, 3, 42, true)
	wantTCheckpoint(t, tb, 0, 0, false)
	// Checkpoint zero is a real checkpoint, distinct from none.
	tapply(t, tb, 4, 0)
	wantTCheckpoint(t, tb, 4, 0, true)
	// A checkpoint may move backwards (a restore from an earlier offset).
	tapply(t, tb, 3, 40)
	wantTCheckpoint(t, tb, 3, 40, true)
}

func testTableDropPartition(t *testing.T, open TablesOpener, sh shape) {
	_, tb := openTable(t, open, sh.spec)
	p0 := tableData(sh, 1, 30, 0)
	p1 := tableData(sh, 2, 20, 1)
	tapply(t, tb, 0, 8, p0...)
	tapply(t, tb, 1, 7, p1...)
	before := tclaim(t, tb, 0)

	tdrop(t, tb, 0)
	wantTAbsent(t, tb, docKeys(p0)...)
	wantTDoc(t, tb, p1...)
	wantTCheckpoint(t, tb, 0, 0, false)
	wantTCheckpoint(t, tb, 1, 7, true)

	md := tmodelOf(p1) // partition 1's docs only
	wantTPagedAll(t, tb, sh, md, 7)
	wantTLoad(t, tb, append([][]byte{p1[0].Key}, docKeys(p0)...), md) // only p1[0]
	// Claims keep increasing across a drop, so an old owner stays fenced.
	if after := tclaim(t, tb, 0); after <= before {
		t.Fatalf("Claim after the drop = %d; want > %d", after, before)
	}
	late := tdoc(sh, 5_000_000, 0, 1, 1, "late")
	wantApply(t, tb, tbatch(0, before, 9, late), engine.ErrFenced, "with the epoch claimed before the drop")
	wantTAbsent(t, tb, late.Key)
	// The next owner restores from the start of the changelog: versions
	// lower than the dropped documents' are accepted again.
	restored := p0[len(p0)-1].Clone()
	restored.Version, restored.Value = 1, []byte("restored")
	tapply(t, tb, 0, 2, restored)
	wantTDoc(t, tb, restored)
	wantTCheckpoint(t, tb, 0, 2, true)
	md[string(restored.Key)] = restored
	wantTIndexes(t, tb, sh, md, 100, false)
	// Dropping an empty or unknown partition is not an error.
	tdrop(t, tb, 9)
	wantTCheckpoint(t, tb, 1, 7, true)
}
