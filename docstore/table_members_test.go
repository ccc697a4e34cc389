package docstore

import (
	"context"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestTableUpdateWritesOnlyWhatChanged checks the keys a table Apply
// writes per document: a new one its document, an entry per index and its
// members key; an update its document, plus a deletion and a set per
// index whose value changed, plus the members key's move when the
// partition changed. The table must agree with what was written after
// each (wantTableDocs: index entries, members keys and size included).
func TestTableUpdateWritesOnlyWhatChanged(t *testing.T) {
	var c *faultKV
	s := openTemp(t, WithFsync(false), withFaultKV(&c))
	defer s.Close()
	ctx := context.Background()
	tb := mustTable(t, s, ordersSpec)
	withIndex := func(d engine.Doc, from engine.Doc) engine.Doc {
		d.Index = from.Index
		return d
	}
	v1 := orderDoc(1, 0, 1)
	v2 := orderDoc(1, 0, 2) // both index values differ from v1's
	if v1.Index[0] == v2.Index[0] || v1.Index[1] == v2.Index[1] {
		t.Fatalf("orderDoc versions 1 and 2 share an index value: %v, %v", v1.Index, v2.Index)
	}
	v3 := withIndex(orderDoc(1, 0, 3), v2)
	v4 := withIndex(orderDoc(1, 1, 4), v2) // moves to partition 1
	v5 := orderDoc(1, 1, 5)
	v5.Index = []engine.IndexValue{v5.Index[0], v4.Index[1]} // only the first changes
	v6 := withIndex(orderDoc(1, 2, 6), v5)
	v6.Index = []engine.IndexValue{v5.Index[0], engine.Str("moved and changed")}
	cases := []struct {
		name string
		doc  engine.Doc
		want int64 // keys written, the checkpoint and collection size included
	}{
		{"new document", v1, 1 + 2 + 1 + 2},                // doc, 2 entries, members; size, checkpoint
		{"both index values changed", v2, 1 + 4 + 1},       // doc, 2 entries moved; checkpoint
		{"no index value changed", v3, 1 + 1},              // doc; checkpoint
		{"moved, same index values", v4, 1 + 2 + 1},        // doc, members del + set; checkpoint
		{"one index value changed", v5, 1 + 2 + 1},         // doc, 1 entry moved; checkpoint
		{"moved and one value changed", v6, 1 + 2 + 2 + 1}, // doc, 1 entry moved, members moved; checkpoint
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			epoch, err := tb.Claim(ctx, tc.doc.Partition)
			if err != nil {
				t.Fatal(err)
			}
			before := c.writes.Load()
			b := engine.DocBatch{Partition: tc.doc.Partition, Epoch: epoch, Docs: []engine.Doc{tc.doc}, Checkpoint: int64(i + 1)}
			if err := tb.Apply(ctx, b); err != nil {
				t.Fatal(err)
			}
			if got := c.writes.Load() - before; got != tc.want {
				t.Errorf("Apply wrote %d keys; want %d", got, tc.want)
			}
			wantTableDocs(t, s, tb, []engine.Doc{tc.doc})
		})
	}
}

// TestTableDropReadsTheDocuments drops a partition whose documents all
// changed their index values since they were written (so the members keys
// were not rewritten), with the write cache as the writes left it and
// emptied, over more than one drop chunk: every index entry of the dropped
// documents goes, the other partition's stay.
func TestTableDropReadsTheDocuments(t *testing.T) {
	const n = 2*dropChunk + 300
	for _, cold := range []bool{false, true} {
		t.Run(map[bool]string{false: "write cache as written", true: "write cache empty"}[cold], func(t *testing.T) {
			s := openTemp(t, WithFsync(false))
			defer s.Close()
			tb := mustTable(t, s, ordersSpec)
			var kept []engine.Doc
			for version := int64(1); version <= 2; version++ {
				docs := map[int32][]engine.Doc{}
				for i := range n {
					p := int32(i % 2)
					docs[p] = append(docs[p], orderDoc(i, p, version))
				}
				for p, ds := range docs {
					applyDocs(t, tb, p, version, ds...)
				}
				kept = docs[1]
			}
			if cold {
				s.wmu.Lock()
				s.tcache.clearAll()
				s.wmu.Unlock()
			}
			if err := tb.DropPartition(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			wantTableDocs(t, s, tb, kept)
		})
	}
}
