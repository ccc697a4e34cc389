package web

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/keepstate/keepstate/engine"
)

// fakeTable is a Table for this package's tests only: every document in a
// slice, kept sorted by key and filtered and sorted with Spec().Before per
// query. The real tables (engine/memstore, docstore, redisstore) have their
// own conformance suite (engine/storetest); the web tests need only the
// contract. Like the movie cluster, every instance of a test cluster holds
// every document (as stale copies would), so that an answer from a
// partition the instance does not own shows.
type fakeTable struct {
	spec    engine.TableSpec
	intKeys bool  // int64 keys (8 bytes big-endian), else UTF-8 strings
	n       int32 // partitions
	shared  bool
	docs    []engine.Doc

	mu       sync.Mutex
	self     string
	owners   map[int32]string // partition -> owner address (self included)
	err      error            // when set, Get and QueryLocal return it
	badValue bool             // when set, ValueJSON returns a JSON array
	queries  []engine.IndexQuery
}

var _ Table = (*fakeTable)(nil)

// clone returns a fake with the same documents and its own ownership.
func (f *fakeTable) clone() *fakeTable {
	return &fakeTable{spec: f.spec, intKeys: f.intKeys, n: f.n, shared: f.shared, docs: f.docs}
}

func (f *fakeTable) setOwners(self string, o map[int32]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.self, f.owners = self, o
}

func (f *fakeTable) ownership() (string, map[int32]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.self, f.owners
}

func (f *fakeTable) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeTable) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// mine reports whether partition p is answered here.
func (f *fakeTable) mine(p int32) bool {
	if f.shared {
		return true
	}
	self, owners := f.ownership()
	return owners[p] == self
}

func (f *fakeTable) Spec() engine.TableSpec { return f.spec }

func (f *fakeTable) KeyKind() string {
	if f.intKeys {
		return "int64"
	}
	return "string"
}

func (f *fakeTable) ParseKey(s string) ([]byte, error) {
	if f.intKeys {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("key is not a 64-bit integer: %w", engine.ErrInvalid)
		}
		return binary.BigEndian.AppendUint64(nil, uint64(id)), nil
	}
	if s == "" || len(s) > engine.MaxKeyBytes || !utf8.ValidString(s) {
		return nil, fmt.Errorf("key must be 1 to %d bytes of UTF-8: %w", engine.MaxKeyBytes, engine.ErrInvalid)
	}
	return []byte(s), nil
}

func (f *fakeTable) FormatKey(key []byte) string {
	if f.intKeys && len(key) == 8 {
		return strconv.FormatInt(int64(binary.BigEndian.Uint64(key)), 10)
	}
	return string(key)
}

func (f *fakeTable) ValueJSON(d engine.Doc) (json.RawMessage, error) {
	f.mu.Lock()
	bad := f.badValue
	f.mu.Unlock()
	if bad {
		return json.RawMessage(`[1,2]`), nil
	}
	return json.RawMessage(d.Value), nil
}

func (f *fakeTable) find(key []byte) (engine.Doc, bool) {
	i := sort.Search(len(f.docs), func(i int) bool { return string(f.docs[i].Key) >= string(key) })
	if i < len(f.docs) && string(f.docs[i].Key) == string(key) {
		return f.docs[i].Clone(), true
	}
	return engine.Doc{}, false
}

func (f *fakeTable) Get(ctx context.Context, key []byte) (engine.Doc, error) {
	if err := f.failure(); err != nil {
		return engine.Doc{}, err
	}
	if !f.mine(engine.PartitionFor(key, f.n)) {
		return engine.Doc{}, fmt.Errorf("partition not here: %w", engine.ErrUnavailable)
	}
	d, ok := f.find(key)
	if !ok {
		return engine.Doc{}, fmt.Errorf("key %x: %w", key, engine.ErrNotFound)
	}
	return d, nil
}

func (f *fakeTable) QueryLocal(ctx context.Context, q engine.IndexQuery) (engine.DocPage, []int32, error) {
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.mu.Unlock()
	if err := f.failure(); err != nil {
		return engine.DocPage{}, nil, err
	}
	pos, kind, err := q.Validate(f.spec)
	if err != nil {
		return engine.DocPage{}, nil, err
	}
	var covered []int32
	for p := int32(0); p < f.n; p++ {
		if f.mine(p) {
			covered = append(covered, p)
		}
	}
	var hits []engine.Doc
	for _, d := range f.docs {
		cur := engine.IndexCursor{Value: d.Index[pos], Key: d.Key}
		if f.mine(d.Partition) && q.InRange(d.Index[pos], kind) && (q.After == nil || f.spec.Before(*q.After, cur, kind, q.Desc)) {
			hits = append(hits, d.Clone())
		}
	}
	sort.Slice(hits, func(i, j int) bool {
		a := engine.IndexCursor{Value: hits[i].Index[pos], Key: hits[i].Key}
		b := engine.IndexCursor{Value: hits[j].Index[pos], Key: hits[j].Key}
		return f.spec.Before(a, b, kind, q.Desc)
	})
	var page engine.DocPage
	if len(hits) >= q.Limit {
		hits = hits[:q.Limit]
		last := hits[len(hits)-1]
		page.Next = &engine.IndexCursor{Value: last.Index[pos], Key: last.Key}
	}
	page.Docs = hits
	return page, covered, nil
}

func (f *fakeTable) lastQuery() (engine.IndexQuery, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queries) == 0 {
		return engine.IndexQuery{}, false
	}
	return f.queries[len(f.queries)-1], true
}

func (f *fakeTable) queryCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queries)
}

func (f *fakeTable) Owner(ctx context.Context, key []byte) (string, bool, error) {
	self, owners := f.ownership()
	addr, ok := owners[engine.PartitionFor(key, f.n)]
	if !ok {
		return "", false, fmt.Errorf("no owner: %w", engine.ErrUnavailable)
	}
	return addr, addr == self, nil
}

func (f *fakeTable) Membership(ctx context.Context) (engine.Membership, error) {
	self, owners := f.ownership()
	return engine.Membership{Partitions: f.n, Self: self, Owners: owners}, nil
}

func (f *fakeTable) Shared() bool { return f.shared }

// newFakeTable returns a fake of spec holding docs over n partitions, every
// partition owned here.
func newFakeTable(spec engine.TableSpec, intKeys bool, n int32, docs []engine.Doc) *fakeTable {
	for i := range docs {
		docs[i].Partition = engine.PartitionFor(docs[i].Key, n)
	}
	sort.Slice(docs, func(i, j int) bool { return string(docs[i].Key) < string(docs[j].Key) })
	f := &fakeTable{spec: spec, intKeys: intKeys, n: n, docs: docs}
	owners := map[int32]string{}
	for p := int32(0); p < n; p++ {
		owners[p] = "127.0.0.1:1"
	}
	f.setOwners("127.0.0.1:1", owners)
	return f
}

var customersSpec = engine.TableSpec{Name: "customers", Indexes: []engine.IndexSpec{
	{Name: "total", Kind: engine.IndexNumber},
	{Name: "tier", Kind: engine.IndexString},
}}

var scoresSpec = engine.TableSpec{Name: "scores", TiesAscending: true, Indexes: []engine.IndexSpec{
	{Name: "score", Kind: engine.IndexNumber},
}}

var tiers = []string{"bronze", "silver", "gold", "platinum ✓"}

// customers returns a string-keyed table of n customers: keys with slashes,
// spaces, percent signs, dots and non-ASCII letters, totals with ties, tiers.
func customers(n int) *fakeTable {
	docs := make([]engine.Doc, 0, n)
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("c%03d", i)
		switch {
		case i == 13:
			key = "."
		case i == 26:
			key = ".."
		case i%7 == 0:
			key = "a/b " + key
		case i%5 == 0:
			key = "ü%20" + key
		case i%11 == 0:
			key = key + "?x=1#y"
		}
		total := float64((i*37)%23) * 10.5
		docs = append(docs, engine.Doc{
			Key:     []byte(key),
			Version: int64(i * 10),
			Value:   []byte(fmt.Sprintf(`{"orders": %d, "total": %g, "note": "<b>&</b>"}`, i, total)),
			Index:   []engine.IndexValue{engine.Num(total), engine.Str(tiers[i%len(tiers)])},
		})
	}
	return newFakeTable(customersSpec, false, 6, docs)
}

// scores returns an int64-keyed table of n players (negative ids too) with
// one number index with ties, ordered ties-ascending.
func scores(n int) *fakeTable {
	docs := make([]engine.Doc, 0, n)
	for i := 1; i <= n; i++ {
		id := int64(i*7919%1000) - 500
		score := float64(i%9) - 4
		docs = append(docs, engine.Doc{
			Key:     binary.BigEndian.AppendUint64(nil, uint64(id)),
			Version: int64(i),
			Value:   []byte(fmt.Sprintf(`{"player":%d,"score":%g}`, id, score)),
			Index:   []engine.IndexValue{engine.Num(score)},
		})
	}
	return newFakeTable(scoresSpec, true, 6, docs)
}

// wantOrder returns the documents of f matching q in q's order, computed
// independently of Spec().Before: by value, then by key ascending, or for
// a descending query by value descending, then key descending unless the
// spec orders ties ascending.
func wantOrder(f *fakeTable, q engine.IndexQuery) []engine.Doc {
	pos, ix, _ := f.spec.Index(q.Index)
	less := func(a, b engine.IndexValue) bool {
		if ix.Kind == engine.IndexNumber {
			return a.Num < b.Num
		}
		return a.Str < b.Str
	}
	var out []engine.Doc
	for _, d := range f.docs {
		v := d.Index[pos]
		if (q.HasMin && less(v, q.Min)) || (q.HasMax && less(q.Max, v)) {
			continue
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Index[pos], out[j].Index[pos]
		if less(a, b) || less(b, a) {
			return less(a, b) != q.Desc
		}
		keyLess := string(out[i].Key) < string(out[j].Key)
		if q.Desc && !f.spec.TiesAscending {
			return !keyLess
		}
		return keyLess
	})
	return out
}
