package docstore

import (
	"bytes"

	"github.com/keepstate/keepstate/engine"
)

// walkTiesAscending returns the keys of the first q.Limit entries w keeps
// of a descending query on a TiesAscending table (values descending, equal
// values by key ascending), within [lower, upper) and after q.After. It
// walks the (value, key) ascending entries backwards, gathering each value
// group's kept keys and adding them in key order once past the group's
// first entry. A group with more kept keys than the page still needs ends
// the page, its first keys read forwards instead: O(Limit) steps however
// many documents tie.
func (t *table) walkTiesAscending(w walker, r kvReader, pos int, kind engine.IndexKind, q engine.IndexQuery, lower, upper []byte) (_ [][]byte, err error) {
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
	// group appends the kept keys of the entries from start on that begin
	// with gs (the first entry key of one value), up to the limit.
	group := func(gs, start []byte) error {
		for ok := fwd.seek(start); ok && bytes.HasPrefix(fwd.key(), gs); ok = fwd.next() {
			_, key, err := w.entry(fwd.key(), ip, kind)
			if err != nil {
				return err
			}
			if !w.kept(key) {
				continue
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
	// (no entry equals it: keys are not empty), so the reverse seek lands
	// on the last entry below it.
	var gs []byte     // the first entry key of the group being gathered
	var held [][]byte // its kept keys so far, descending
	for ok := len(keys) < q.Limit && rev.seek(hi); ok; ok = rev.next() {
		v, key, err := w.entry(rev.key(), ip, kind)
		if err != nil {
			return nil, err
		}
		if gs == nil || !bytes.HasPrefix(rev.key(), gs) { // a lower value
			keys, held = appendReversed(keys, held), held[:0]
			if len(keys) == q.Limit {
				return keys, nil
			}
			gs = t.valueStart(pos, kind, v)
		}
		if !w.kept(key) {
			continue
		}
		if held = append(held, bytes.Clone(key)); len(held) > q.Limit-len(keys) {
			// More ties than the page needs: its first ones, forwards.
			return keys, group(gs, gs)
		}
	}
	return appendReversed(keys, held), nil
}

// appendReversed appends the keys of held to keys, last first.
func appendReversed(keys, held [][]byte) [][]byte {
	for i := len(held) - 1; i >= 0; i-- {
		keys = append(keys, held[i])
	}
	return keys
}
