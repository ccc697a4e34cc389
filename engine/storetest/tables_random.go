package storetest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// testTableRandomModel runs a seeded random mix of operations (fresh
// batches, replays with stale docs, refused stale batches, re-claims that
// fence old epochs, drops, empty batches), checking Get, Load, Checkpoint
// and random queries against a model, then pages through every index.
func testTableRandomModel(t *testing.T, open TablesOpener, sh shape) {
	const (
		ops   = 300
		parts = 3
		keys  = 48 // key i lives in partition i % parts
	)
	_, tb := openTable(t, open, sh.spec)
	r := rand.New(rand.NewPCG(20240611, uint64(len(sh.spec.Indexes))))
	md := tmodel{}
	ckpt := map[int32]int64{}
	var epochs [parts]int64
	var version int64
	epoch := func(p int32) int64 {
		if epochs[p] == 0 {
			epochs[p] = tclaim(t, tb, p)
		}
		return epochs[p]
	}
	// keysOf returns up to n distinct random key numbers of partition p.
	keysOf := func(p int32, n int) []int {
		perm := r.Perm(keys / parts)
		out := make([]int, 0, n)
		for _, j := range perm[:min(n, len(perm))] {
			out = append(out, j*parts+int(p))
		}
		return out
	}
	// randKey returns one of the keys, or a few never written.
	randKey := func() []byte {
		i := r.IntN(keys + 4)
		return sh.keyIn(i, int32(i%parts))
	}
	fresh := func(i int, p int32) engine.Doc {
		version++
		d := tdoc(sh, i, p, version, 0, "")
		d.Index = randIndex(r, sh.spec, true)
		d.Value = fmt.Appendf(nil, "random %d/%d %x", i, version, r.Uint32())
		if r.IntN(4) == 0 {
			d.Sources = nil
		}
		return d
	}
	// commit applies b, which must succeed, and records write and b's
	// checkpoint in the model.
	commit := func(b engine.DocBatch, what string, write []engine.Doc) {
		t.Helper()
		wantApply(t, tb, b, nil, what)
		for _, d := range write {
			md[string(d.Key)] = d
		}
		ckpt[b.Partition] = b.Checkpoint
	}
	for op := range ops {
		p := int32(r.IntN(parts))
		step := fmt.Sprintf("op %d", op)
		switch x := r.IntN(100); {
		case x < 30: // a batch of fresh versions
			var docs []engine.Doc
			for _, i := range keysOf(p, 1+r.IntN(6)) {
				docs = append(docs, fresh(i, p))
			}
			what := fmt.Sprintf("of %d fresh docs (%s)", len(docs), step)
			commit(tbatch(p, epoch(p), int64(op), docs...), what, docs)
		case x < 36: // a replay mixing stale and fresh docs
			var docs, write []engine.Doc
			for _, i := range keysOf(p, 1+r.IntN(6)) {
				d := fresh(i, p)
				if old, ok := md[string(d.Key)]; ok && r.IntN(2) == 0 {
					d.Version = old.Version - int64(r.IntN(2)) // equal or older: skipped
				} else {
					write = append(write, d)
				}
				docs = append(docs, d)
			}
			b := tbatch(p, epoch(p), int64(op), docs...)
			b.Replay = true
			commit(b, "of a replay batch ("+step+")", write)
		case x < 40: // a stale doc refuses the whole batch
			in := slices.DeleteFunc(md.sorted(), func(d engine.Doc) bool { return d.Partition != p })
			if len(in) == 0 {
				continue
			}
			stale := fresh(0, p)
			old := in[r.IntN(len(in))]
			stale.Key, stale.Version = old.Key, old.Version-int64(r.IntN(3))
			docs := []engine.Doc{stale}
			for _, i := range keysOf(p, 2) {
				if d := fresh(i, p); string(d.Key) != string(old.Key) {
					docs = append(docs, d)
				}
			}
			r.Shuffle(len(docs), func(i, j int) { docs[i], docs[j] = docs[j], docs[i] })
			wantApply(t, tb, tbatch(p, epoch(p), int64(op), docs...), engine.ErrFenced,
				fmt.Sprintf("with stale %s (stored version %d, %s)", showDoc(stale), old.Version, step))
		case x < 44: // a new claim fences the old epoch
			old := epoch(p)
			epochs[p] = tclaim(t, tb, p)
			if epochs[p] <= old {
				t.Fatalf("%s: Claim(%d) = %d; want > %d", step, p, epochs[p], old)
			}
			b := tbatch(p, old, int64(op), fresh(keysOf(p, 1)[0], p))
			wantApply(t, tb, b, engine.ErrFenced, fmt.Sprintf("with epoch %d after claim %d (%s)", old, epochs[p], step))
		case x < 47: // the partition moves away
			tdrop(t, tb, p)
			maps.DeleteFunc(md, func(_ string, d engine.Doc) bool { return d.Partition == p })
			delete(ckpt, p)
		case x < 50: // a batch without docs moves the checkpoint
			commit(tbatch(p, epoch(p), int64(op)), "of no docs ("+step+")", nil)
		case x < 58:
			key := randKey()
			if want, ok := md[string(key)]; ok {
				wantTDoc(t, tb, want)
			} else {
				wantTAbsent(t, tb, key)
			}
		case x < 62:
			var ks [][]byte
			for range r.IntN(8) {
				ks = append(ks, randKey())
			}
			wantTLoad(t, tb, ks, md)
		case x < 66:
			want, ok := ckpt[p]
			wantTCheckpoint(t, tb, p, want, ok)
		default:
			wantTPage(t, tb, md, randQuery(r, sh, md, keys))
		}
	}
	wantTPagedAll(t, tb, sh, md, 7)
}

// randQuery returns a random valid query of sh's indexes: bounds and
// cursors from stored documents or from anywhere.
func randQuery(r *rand.Rand, sh shape, md tmodel, keys int) engine.IndexQuery {
	pos := r.IntN(len(sh.spec.Indexes))
	ix := sh.spec.Indexes[pos]
	docs := md.sorted()
	value := func() engine.IndexValue {
		if len(docs) > 0 && r.IntN(2) == 0 {
			return docs[r.IntN(len(docs))].Index[pos]
		}
		return randValue(r, ix.Kind, true)
	}
	q := engine.IndexQuery{Index: ix.Name, Desc: r.IntN(2) == 0, Limit: 1 + r.IntN(8)}
	if r.IntN(2) == 0 {
		q.Min, q.HasMin = value(), true
	}
	if r.IntN(2) == 0 {
		q.Max, q.HasMax = value(), true
	}
	switch r.IntN(3) {
	case 0:
		if len(docs) > 0 {
			c := cursorAt(docs[r.IntN(len(docs))], pos)
			q.After = &c
		}
	case 1:
		q.After = &engine.IndexCursor{Value: value(), Key: sh.key(r.IntN(keys+4) - 2)}
	}
	return q
}
