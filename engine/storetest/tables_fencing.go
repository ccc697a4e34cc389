package storetest

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

func testTableApplyInvalid(t *testing.T, open TablesOpener, sh shape) {
	has := map[engine.IndexKind]bool{}
	for _, ix := range sh.spec.Indexes {
		has[ix.Kind] = true
	}
	// Each case breaks a valid document of key 3 in partition 0.
	type breaker func(d *engine.Doc)
	setNum := func(v float64) breaker {
		return func(d *engine.Doc) { d.Index = index(sh.spec, v, "gold") }
	}
	setStr := func(v string) breaker {
		return func(d *engine.Doc) { d.Index = index(sh.spec, 1, v) }
	}
	cases := []struct {
		name string
		kind engine.IndexKind // only for shapes with an index of this kind (0: any)
		brk  breaker
	}{
		{"no index values", 0, func(d *engine.Doc) { d.Index = nil }},
		{"one index value too few", 0, func(d *engine.Doc) { d.Index = d.Index[:len(d.Index)-1] }},
		{"one index value too many", 0, func(d *engine.Doc) { d.Index = append(d.Index, engine.Num(1)) }},
		{"NaN number", engine.IndexNumber, setNum(math.NaN())},
		{"infinite number", engine.IndexNumber, setNum(math.Inf(1))},
		{"negative infinite number", engine.IndexNumber, setNum(math.Inf(-1))},
		{"string with NUL", engine.IndexString, setStr("gold\x00")},
		{"string not UTF-8", engine.IndexString, setStr("gold\xff")},
		{"string too long", engine.IndexString, setStr(strings.Repeat("z", engine.MaxIndexStringBytes+1))},
		{"empty key", 0, func(d *engine.Doc) { d.Key = nil }},
		{"zero-length key", 0, func(d *engine.Doc) { d.Key = []byte{} }},
		{"key too long", 0, func(d *engine.Doc) { d.Key = bytes.Repeat([]byte{'k'}, engine.MaxKeyBytes+1) }},
		{"partition of another batch", 0, func(d *engine.Doc) { d.Partition = 1 }},
		{"negative partition", 0, func(d *engine.Doc) { d.Partition = -1 }},
	}
	for _, tc := range cases {
		if tc.kind != 0 && !has[tc.kind] {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			_, tb := openTable(t, open, sh.spec)
			a := tdoc(sh, 1, 0, 1, 5, "gold")
			tapply(t, tb, 0, 5, a)
			md := tmodelOf([]engine.Doc{a})
			newer := tdoc(sh, 1, 0, 2, 9, "silver")
			other := tdoc(sh, 2, 0, 3, 7, "b")
			bad := tdoc(sh, 3, 0, 4, 1, "a")
			tc.brk(&bad)
			if err := bad.Validate(sh.spec); err == nil && bad.Partition == 0 {
				t.Fatalf("test bug: %s is valid", showDoc(bad))
			}
			for _, docs := range [][]engine.Doc{{other, newer, bad}, {bad, other, newer}} {
				wantApply(t, tb, tbatch(0, tclaim(t, tb, 0), 9, docs...), engine.ErrInvalid, "with "+tc.name)
				wantTCheckpoint(t, tb, 0, 5, true)
				wantTDoc(t, tb, a)
				wantTAbsent(t, tb, other.Key)
				if len(bad.Key) > 0 && !bytes.Equal(bad.Key, a.Key) {
					wantTAbsent(t, tb, bad.Key)
				}
				wantTIndexes(t, tb, sh, md, 10, false)
			}
			// The table still accepts a valid batch afterwards.
			tapply(t, tb, 0, 10, newer, other)
			wantTDoc(t, tb, newer, other)
		})
	}
}

func testTableVersionFencing(t *testing.T, open TablesOpener, sh shape) {
	cases := []struct {
		name  string
		stale int64 // version of the refused document; the stored version is 5
	}{
		{"equal version", 5},
		{"older version", 4},
		{"much older version", 0},
		{"negative version", -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, tb := openTable(t, open, sh.spec)
			a, b := tdoc(sh, 1, 0, 5, 2, "a"), tdoc(sh, 2, 0, 5, 3, "b")
			tapply(t, tb, 0, 10, a, b)
			md := tmodelOf([]engine.Doc{a, b})

			batch := tbatch(0, tclaim(t, tb, 0), 20,
				tdoc(sh, 3, 0, 1, 1, "c"),        // new document
				tdoc(sh, 1, 0, 6, 8, "z"),        // newer version of a, moving in the indexes
				tdoc(sh, 2, 0, tc.stale, 9, "y"), // stale version of b
			)
			wantApply(t, tb, batch, engine.ErrFenced, "with a stale document")
			wantTDoc(t, tb, a, b)
			wantTAbsent(t, tb, sh.keyIn(3, 0))
			wantTCheckpoint(t, tb, 0, 10, true)
			wantTIndexes(t, tb, sh, md, 10, false)

			// The same table still accepts a valid batch afterwards.
			newer := tdoc(sh, 2, 0, 6, 4, "d")
			tapply(t, tb, 0, 21, newer)
			wantTDoc(t, tb, newer)
		})
	}
}

func testTableReplay(t *testing.T, open TablesOpener, sh shape) {
	_, tb := openTable(t, open, sh.spec)
	a, b := tdoc(sh, 1, 0, 5, 2, "a"), tdoc(sh, 2, 0, 5, 3, "b")
	tapply(t, tb, 0, 10, a, b)
	// replay applies a replay batch of docs with the current epoch.
	replay := func(checkpoint int64, what string, docs ...engine.Doc) {
		t.Helper()
		batch := tbatch(0, tclaim(t, tb, 0), checkpoint, docs...)
		batch.Replay = true
		wantApply(t, tb, batch, nil, what)
	}
	staleA := tdoc(sh, 1, 0, 4, 100, "stale") // older: skipped, index entries too
	equalB := tdoc(sh, 2, 0, 5, 101, "equal") // equal: skipped
	c := tdoc(sh, 3, 0, 6, 4, "c")            // new: written
	replay(20, "of a replay batch", staleA, equalB, c)
	wantTDoc(t, tb, a, b, c)
	wantTCheckpoint(t, tb, 0, 20, true)
	md := tmodelOf([]engine.Doc{a, b, c})
	wantTIndexes(t, tb, sh, md, 10, false, true)

	laterA := tdoc(sh, 1, 0, 8, 1, "later") // newer than stored: written
	replay(21, "of a replay batch", laterA, tdoc(sh, 2, 0, 1, 1, "old"))
	wantTDoc(t, tb, laterA, b)
	wantTCheckpoint(t, tb, 0, 21, true)
	md[string(laterA.Key)] = laterA
	wantTIndexes(t, tb, sh, md, 10, false)
	// A replay batch of only stale documents still moves the checkpoint.
	replay(22, "of a replay batch of stale documents", staleA, equalB)
	wantTDoc(t, tb, laterA)
	wantTCheckpoint(t, tb, 0, 22, true)
	// A replay batch is still fenced by epochs.
	old := tclaim(t, tb, 0)
	tclaim(t, tb, 0)
	batch := tbatch(0, old, 30, tdoc(sh, 4, 0, 1, 1, "d"))
	batch.Replay = true
	wantApply(t, tb, batch, engine.ErrFenced, "of a replay batch with an old epoch")
	wantTAbsent(t, tb, sh.keyIn(4, 0))
	wantTCheckpoint(t, tb, 0, 22, true)
}

func testTableEpochFencing(t *testing.T, open TablesOpener, sh shape) {
	_, tb := openTable(t, open, sh.spec)
	var old int64 // the last of ten increasing claims
	for i := range 10 {
		e := tclaim(t, tb, 0)
		if i > 0 && e <= old {
			t.Fatalf("claim %d of partition 0 = %d; want > %d", i, e, old)
		}
		old = e
	}
	current := tclaim(t, tb, 0)
	d1 := tdoc(sh, 1, 0, 1, 5, "a")
	for _, docs := range [][]engine.Doc{{d1}, nil} {
		wantApply(t, tb, tbatch(0, old, 5, docs...), engine.ErrFenced,
			fmt.Sprintf("of %d docs with epoch %d after claim %d", len(docs), old, current))
	}
	wantTAbsent(t, tb, d1.Key)
	wantTCheckpoint(t, tb, 0, 0, false)
	wantApply(t, tb, tbatch(0, current, 6, d1), nil, "with the current epoch")
	wantTCheckpoint(t, tb, 0, 6, true)
	// A batch without documents confirms the claim and moves the checkpoint.
	wantApply(t, tb, tbatch(0, current, 7), nil, "of no docs with the current epoch")
	wantTCheckpoint(t, tb, 0, 7, true)

	t.Run("an epoch the table never handed out is fenced", func(t *testing.T) {
		// A store that lost its state since the claim must not accept the
		// writer's batches: its epoch is newer than the store's, or the
		// partition has no claim at all.
		d4, d5 := tdoc(sh, 4, 0, 1, 5, "a"), tdoc(sh, 5, 7, 1, 5, "a")
		for _, b := range []engine.DocBatch{tbatch(0, current+1, 8, d4), tbatch(0, current+1, 8),
			tbatch(7, 1, 8, d5), tbatch(7, 0, 8, d5), tbatch(7, 1, 8)} {
			wantApply(t, tb, b, engine.ErrFenced,
				fmt.Sprintf("to partition %d with unclaimed epoch %d (%d docs)", b.Partition, b.Epoch, len(b.Docs)))
		}
		wantTAbsent(t, tb, d4.Key, d5.Key)
		wantTCheckpoint(t, tb, 0, 7, true)
		wantTCheckpoint(t, tb, 7, 0, false)
	})

	t.Run("partitions are independent", func(t *testing.T) {
		e1 := tclaim(t, tb, 1)
		for range 5 {
			tclaim(t, tb, 0)
		}
		b := tbatch(1, e1, 3, tdoc(sh, 2, 1, 1, 5, "a"))
		wantApply(t, tb, b, nil, "to partition 1 after claims of partition 0")
		wantTCheckpoint(t, tb, 1, 3, true)
		if e2 := tclaim(t, tb, 1); e2 <= e1 {
			t.Fatalf("second claim of partition 1 = %d; want > %d", e2, e1)
		}
		b = tbatch(1, e1, 4, tdoc(sh, 3, 1, 1, 5, "a"))
		wantApply(t, tb, b, engine.ErrFenced, "to partition 1 with an old epoch")
		wantTAbsent(t, tb, sh.keyIn(3, 1))
		wantTCheckpoint(t, tb, 1, 3, true)
		wantTCheckpoint(t, tb, 0, 7, true)
	})
}
