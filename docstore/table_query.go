package docstore

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/keepstate/keepstate/engine"
)

var _ engine.FilteredQuerier = (*table)(nil)

// Query answers q from one snapshot by one walk over its index's entries
// between the bounds (backwards when q.Desc; by value groups on a
// TiesAscending table, walkTiesAscending), after q.After, up to q.Limit
// entries; it reads the page's documents and nothing else. Next is set
// when the page is full. An unknown index or a bad bound is ErrInvalid; a
// cancelled ctx stops the walk.
func (t *table) Query(ctx context.Context, q engine.IndexQuery) (engine.DocPage, error) {
	return t.QueryFiltered(ctx, q, nil)
}

// QueryFiltered is Query skipping the entries whose key keep rejects
// (nil keeps all) before their documents are read: see
// engine.FilteredQuerier.
func (t *table) QueryFiltered(ctx context.Context, q engine.IndexQuery, keep func(key []byte) bool) (engine.DocPage, error) {
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
		w := walker{ctx: ctx, keep: keep, counted: &t.s.counts.indexSteps}
		keys, err := walk(w, r, pos, kind, q, lower, upper)
		if err != nil || len(keys) == 0 {
			return err
		}
		page.Docs = make([]engine.Doc, 0, len(keys))
		var buf []byte
		for i, k := range keys {
			if i%walkCheckEvery == walkCheckEvery-1 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
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

// walkCheckEvery is how many steps a query takes between checks of its
// context, so that a query its caller gave up on stops soon.
const walkCheckEvery = 256

// walker is what an index walk checks as it steps: its query's context
// and the keys it keeps (nil keeps all).
type walker struct {
	ctx     context.Context
	keep    func(key []byte) bool
	counted *atomic.Int64 // readCounts.indexSteps
	steps   int
}

// entry steps onto the index entry k (index prefix ip bytes long) and
// returns its value and key, or every walkCheckEvery steps ctx's error.
func (w *walker) entry(k []byte, ip int, kind engine.IndexKind) (engine.IndexValue, []byte, error) {
	w.counted.Add(1)
	if w.steps++; w.steps%walkCheckEvery == 0 {
		if err := w.ctx.Err(); err != nil {
			return engine.IndexValue{}, nil, err
		}
	}
	v, key, good := splitIndexValue(k[ip:], kind)
	if !good || len(key) == 0 {
		return engine.IndexValue{}, nil, fmt.Errorf("corrupt index entry %x", k)
	}
	return v, key, nil
}

// kept reports whether key is kept.
func (w *walker) kept(key []byte) bool { return w.keep == nil || w.keep(key) }

// walkIndex returns the keys of the first q.Limit entries of the index at
// pos within [lower, upper) that w keeps, in q's order.
func (t *table) walkIndex(w walker, r kvReader, pos int, kind engine.IndexKind, q engine.IndexQuery, lower, upper []byte) (_ [][]byte, err error) {
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
		v, key, err := w.entry(it.key(), prefix, kind)
		if err != nil {
			return nil, err
		}
		if !q.InRange(v, kind) || !w.kept(key) { // out of range: never, with the bounds of queryBounds
			continue
		}
		if keys = append(keys, bytes.Clone(key)); len(keys) == q.Limit {
			break
		}
	}
	return keys, nil
}

// rangeBounds returns the entry keys [lower, upper) of the index at pos
// within q's bounds. A string bound or cursor holding 0x00 sorts between
// stored values (they hold none): with P its part before the first 0x00,
// v >= (after) it exactly when v > P and v <= (before) it exactly when
// v <= P, so it is cut at its 0x00 and taken as strict (lower) or
// inclusive (upper).
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
// in q's order (not for a descending TiesAscending query).
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
