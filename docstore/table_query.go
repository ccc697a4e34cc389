package docstore

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/keepstate/keepstate/engine"
)

// Query answers q from the entries of its index: one iterator walk over
// the entries between the bounds (backwards when q.Desc), starting after
// q.After, stopping after q.Limit entries (a descending query on a
// TiesAscending table walks value groups instead, walkTiesAscending); it
// reads the page's documents and nothing else, whatever the table's size.
// Next is set when the page is full. All from one snapshot. An unknown
// index or a bad bound is ErrInvalid.
func (t *table) Query(ctx context.Context, q engine.IndexQuery) (engine.DocPage, error) {
	pos, kind, err := q.Validate(t.spec)
	if err != nil {
		return engine.DocPage{}, fmt.Errorf("table %s: query: %w", t.spec.Name, err)
	}
	lower, upper := t.rangeBounds(pos, kind, q)
	tiesAsc := q.Desc && t.spec.TiesAscending
	if !tiesAsc {
		lower, upper = t.afterBounds(pos, kind, q, lower, upper)
	}
	if bytes.Compare(lower, upper) >= 0 {
		return engine.DocPage{}, nil
	}
	var page engine.DocPage
	err = t.read(ctx, func(r kvReader, _ uint64) error {
		walk := t.walkIndex
		if tiesAsc {
			walk = t.walkTiesAscending
		}
		keys, err := walk(r, pos, kind, q, lower, upper)
		if err != nil || len(keys) == 0 {
			return err
		}
		page.Docs = make([]engine.Doc, 0, len(keys))
		var buf []byte
		for _, k := range keys {
			t.s.counts.docGets.Add(1)
			buf = t.l.docKey(buf[:0], k)
			raw, err := r.get(buf)
			if err != nil {
				return err
			}
			if raw == nil {
				return fmt.Errorf("index %s has an entry for key %s, which has no document", q.Index, keyString(k))
			}
			doc, err := decodeTableDoc(raw, t.spec, false)
			if err != nil {
				return err
			}
			page.Docs = append(page.Docs, doc)
		}
		return nil
	})
	if err != nil {
		return engine.DocPage{}, fmt.Errorf("table %s: query index %s: %w", t.spec.Name, q.Index, err)
	}
	if n := len(page.Docs); n == q.Limit {
		last := page.Docs[n-1]
		page.Next = &engine.IndexCursor{Value: last.Index[pos], Key: bytes.Clone(last.Key)}
	}
	return page, nil
}

// walkIndex returns the keys of the first q.Limit entries of the index at
// pos within [lower, upper), in q's order.
func (t *table) walkIndex(r kvReader, pos int, kind engine.IndexKind, q engine.IndexQuery, lower, upper []byte) (_ [][]byte, err error) {
	it, err := r.iter(lower, upper, q.Desc)
	if err != nil {
		return nil, err
	}
	defer closeInto(it, &err)
	start := lower
	if q.Desc {
		start = upper // reverse seek: the last key <= upper, and upper is excluded
	}
	prefix := len(t.l.indexPrefix(pos))
	var keys [][]byte
	for ok := it.seek(start); ok; ok = it.next() {
		t.s.counts.indexSteps.Add(1)
		v, key, good := splitIndexValue(it.key()[prefix:], kind)
		if !good || len(key) == 0 {
			return nil, fmt.Errorf("corrupt index entry %x", it.key())
		}
		if !q.InRange(v, kind) { // never, with the bounds of queryBounds
			continue
		}
		if keys = append(keys, bytes.Clone(key)); len(keys) == q.Limit {
			break
		}
	}
	return keys, nil
}

// rangeBounds returns the entry keys [lower, upper) of the index at pos
// within q's bounds.
//
// A string bound or cursor holding 0x00 sorts between stored values (they
// hold none): for a prefix P before the first 0x00, a value v is >= (or
// after) P+0x00+R exactly when v > P, and <= (or before) it exactly when v
// <= P, so such a bound is cut at its first 0x00 and taken as strict
// (lower) or inclusive (upper).
func (t *table) rangeBounds(pos int, kind engine.IndexKind, q engine.IndexQuery) (lower, upper []byte) {
	ip := t.l.indexPrefix(pos)
	lower, upper = ip, prefixUpper(ip)
	if q.HasMin {
		lower = t.valueStart(pos, kind, q.Min)
	}
	if q.HasMax {
		if up := t.valueEnd(pos, kind, q.Max); bytes.Compare(up, upper) < 0 {
			upper = up
		}
	}
	return lower, upper
}

// nulPrefix returns the part of a string value before its first 0x00;
// ok is false for a number or a string without one.
func nulPrefix(kind engine.IndexKind, v engine.IndexValue) (p string, ok bool) {
	if kind != engine.IndexString {
		return "", false
	}
	i := strings.IndexByte(v.Str, 0)
	if i < 0 {
		return "", false
	}
	return v.Str[:i], true
}

// valueStart returns the first entry key of value v in the index at pos:
// every entry of a value >= v sorts at or after it, every other before.
// For a string with a 0x00 (see rangeBounds): the first key of values > P.
func (t *table) valueStart(pos int, kind engine.IndexKind, v engine.IndexValue) []byte {
	k := t.l.indexPrefix(pos)
	if p, ok := nulPrefix(kind, v); ok {
		return append(append(k, p...), 1)
	}
	return appendIndexValue(k, v, kind)
}

// valueEnd returns the first entry key after every entry of a value <= v.
func (t *table) valueEnd(pos int, kind engine.IndexKind, v engine.IndexValue) []byte {
	if _, ok := nulPrefix(kind, v); ok {
		return t.valueStart(pos, kind, v)
	}
	return prefixUpper(t.valueStart(pos, kind, v))
}

// afterBounds narrows [lower, upper) to what sorts strictly after q.After
// in q's order (for an ascending query, or a descending one that is its
// exact reverse).
func (t *table) afterBounds(pos int, kind engine.IndexKind, q engine.IndexQuery, lower, upper []byte) ([]byte, []byte) {
	if q.After == nil {
		return lower, upper
	}
	var after []byte  // the first entry key after the cursor
	var before []byte // the first entry key not before it
	if _, ok := nulPrefix(kind, q.After.Value); ok {
		after = t.valueStart(pos, kind, q.After.Value)
		before = after
	} else {
		before = t.l.indexEntry(nil, pos, q.After.Value, kind, q.After.Key)
		after = append(bytes.Clone(before), 0)
	}
	if q.Desc {
		if bytes.Compare(before, upper) < 0 {
			upper = before
		}
	} else if bytes.Compare(after, lower) > 0 {
		lower = after
	}
	return lower, upper
}
