package docstore

import (
	"bytes"
	"fmt"

	"github.com/keepstate/keepstate/engine"
)

// walkTiesAscending returns the keys of the first q.Limit entries of a
// descending query on a table whose spec sets TiesAscending: values
// descending, equal values by key ascending, within [lower, upper) (q's
// bounds) and after q.After. The entries sort by (value, key) ascending,
// so it walks value groups from the top: a reverse seek finds the next
// lower value, a forward walk reads that value's entries in key order.
// Every group visited yields at least one key, so it steps over O(Limit)
// entries however many documents tie.
func (t *table) walkTiesAscending(r kvReader, pos int, kind engine.IndexKind, q engine.IndexQuery, lower, upper []byte) (_ [][]byte, err error) {
	fwd, err := r.iter(lower, upper, false)
	if err != nil {
		return nil, err
	}
	defer closeInto(fwd, &err)
	rev, err := r.iter(lower, upper, true)
	if err != nil {
		return nil, err
	}
	defer closeInto(rev, &err)
	ip := len(t.l.indexPrefix(pos))
	var keys [][]byte
	// group appends the keys of the entries from start on that begin with
	// gs (the first entry key of one value), up to the limit.
	group := func(gs, start []byte) error {
		for ok := fwd.seek(start); ok && bytes.HasPrefix(fwd.key(), gs); ok = fwd.next() {
			t.s.counts.indexSteps.Add(1)
			_, key, good := splitIndexValue(fwd.key()[ip:], kind)
			if !good || len(key) == 0 {
				return fmt.Errorf("corrupt index entry %x", fwd.key())
			}
			if keys = append(keys, bytes.Clone(key)); len(keys) == q.Limit {
				return nil
			}
		}
		return nil
	}
	hi := upper // values below the entry keys before hi are left
	if a := q.After; a != nil {
		gs := t.valueStart(pos, kind, a.Value)
		if _, nul := nulPrefix(kind, a.Value); !nul {
			// The rest of the cursor's own value: keys after its key.
			if err := group(gs, append(t.l.indexEntry(nil, pos, a.Value, kind, a.Key), 0)); err != nil {
				return nil, err
			}
		}
		if bytes.Compare(gs, hi) < 0 {
			hi = gs
		}
	}
	// hi is upper (excluded by the iterator) or a value's first entry key
	// (no entry equals it: keys are not empty), so the last key <= hi is
	// the last entry below it.
	for len(keys) < q.Limit && rev.seek(hi) {
		t.s.counts.indexSteps.Add(1)
		v, _, good := splitIndexValue(rev.key()[ip:], kind)
		if !good {
			return nil, fmt.Errorf("corrupt index entry %x", rev.key())
		}
		gs := t.valueStart(pos, kind, v)
		if err := group(gs, gs); err != nil {
			return nil, err
		}
		hi = gs
	}
	return keys, nil
}
