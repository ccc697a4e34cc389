package memstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/keepstate/keepstate/engine"
)

// Store is an in-memory engine.Tables whose tables live as long as it
// does. It is safe for concurrent use; call New to make one.
type Store struct {
	local  bool
	mu     sync.Mutex
	tables map[string]*table // by name; see OpenTable
}

var (
	_ engine.Tables          = (*Store)(nil)
	_ engine.InstanceLocal   = (*Store)(nil)
	_ engine.Table           = (*table)(nil)
	_ engine.TableScanner    = (*table)(nil)
	_ engine.TableResetter   = (*table)(nil)
	_ engine.FilteredQuerier = (*table)(nil)
)

// Option configures a Store.
type Option func(*Store)

// Local makes the store's tables report themselves as InstanceLocal, as
// docstore's do; by default a Store behaves like a shared store.
func Local() Option { return func(s *Store) { s.local = true } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{tables: map[string]*table{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// InstanceLocal reports whether Local was given.
func (s *Store) InstanceLocal() bool { return s.local }

// Close does nothing: the tables stay readable.
func (s *Store) Close() error { return nil }

// OpenTable returns the table of spec, created empty on the first call for
// spec.Name. Opening the name again with other indexes (or order) or
// TiesAscending, or an invalid spec, fails with engine.ErrInvalid.
func (s *Store) OpenTable(_ context.Context, spec engine.TableSpec) (engine.Table, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("open table: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tb, ok := s.tables[spec.Name]; ok {
		if !slices.Equal(tb.spec.Indexes, spec.Indexes) {
			return nil, fmt.Errorf("open table %s: the index set changed from %v to %v: %w",
				spec.Name, tb.spec.Indexes, spec.Indexes, engine.ErrInvalid)
		}
		if tb.spec.TiesAscending != spec.TiesAscending {
			return nil, fmt.Errorf("open table %s: TiesAscending changed from %v to %v: %w",
				spec.Name, tb.spec.TiesAscending, spec.TiesAscending, engine.ErrInvalid)
		}
		return tb, nil
	}
	tb := &table{local: s.local, docs: map[string]engine.Doc{}, ckpt: map[int32]int64{}, epochs: map[int32]int64{}}
	tb.spec = spec
	tb.spec.Indexes = slices.Clone(spec.Indexes)
	s.tables[spec.Name] = tb
	return tb, nil
}

// table is an in-memory engine.Table: a map under one lock, scanned and
// sorted on every query. Stored documents are never modified in place
// (Apply replaces them), so a reader may keep one after unlocking.
type table struct {
	spec   engine.TableSpec // immutable
	local  bool             // immutable: the Store's Local option
	mu     sync.RWMutex
	docs   map[string]engine.Doc
	ckpt   map[int32]int64
	epochs map[int32]int64
}

// InstanceLocal reports the Store's Local option (see engine.InstanceLocal).
func (t *table) InstanceLocal() bool { return t.local }

// Spec returns a copy of the table's spec.
func (t *table) Spec() engine.TableSpec {
	s := t.spec
	s.Indexes = slices.Clone(s.Indexes)
	return s
}

// Claim raises partition p's epoch and returns it.
func (t *table) Claim(_ context.Context, p int32) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.epochs[p]++
	return t.epochs[p], nil
}

// Checkpoint returns partition p's checkpoint; ok is false when none was
// written.
func (t *table) Checkpoint(_ context.Context, p int32) (int64, bool, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n, ok := t.ckpt[p]
	return n, ok, nil
}

// Load returns copies of the stored documents of keys by string(key);
// keys without a document are absent.
func (t *table) Load(_ context.Context, keys [][]byte) (map[string]engine.Doc, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[string]engine.Doc, len(keys))
	for _, k := range keys {
		if d, ok := t.docs[string(k)]; ok {
			out[string(k)] = d.Clone()
		}
	}
	return out, nil
}

// Apply writes copies of b's documents and its checkpoint atomically, or
// nothing when it fails: with engine.ErrInvalid for an invalid document or
// one of another partition, with engine.ErrFenced when b.Epoch is not the
// current claim or (unless b.Replay, which skips it) a document is not
// newer than the stored one.
func (t *table) Apply(_ context.Context, b engine.DocBatch) error {
	for i, d := range b.Docs {
		if err := d.Validate(t.spec); err != nil {
			return fmt.Errorf("apply to partition %d: doc %d: %w", b.Partition, i, err)
		}
		if d.Partition != b.Partition {
			return fmt.Errorf("apply to table %s partition %d: doc %d belongs to partition %d: %w",
				t.spec.Name, b.Partition, i, d.Partition, engine.ErrInvalid)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur := t.epochs[b.Partition]; b.Epoch == 0 || b.Epoch != cur {
		return fmt.Errorf("apply to table %s partition %d: epoch %d, current claim %d: %w",
			t.spec.Name, b.Partition, b.Epoch, cur, engine.ErrFenced)
	}
	pending := make(map[string]engine.Doc, len(b.Docs))
	for _, d := range b.Docs {
		old, ok := pending[string(d.Key)]
		if !ok {
			old, ok = t.docs[string(d.Key)]
		}
		if ok && d.Version <= old.Version {
			if b.Replay {
				continue
			}
			return fmt.Errorf("apply to table %s partition %d: key %x version %d, stored %d: %w",
				t.spec.Name, b.Partition, d.Key, d.Version, old.Version, engine.ErrFenced)
		}
		pending[string(d.Key)] = d.Clone()
	}
	for k, d := range pending {
		t.docs[k] = d
	}
	t.ckpt[b.Partition] = b.Checkpoint
	return nil
}

// DropPartition deletes partition p's documents and checkpoint; its epoch
// stays.
func (t *table) DropPartition(_ context.Context, p int32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, d := range t.docs {
		if d.Partition == p {
			delete(t.docs, k)
		}
	}
	delete(t.ckpt, p)
	return nil
}

// Get returns a copy of key's document, or an error wrapping
// engine.ErrNotFound.
func (t *table) Get(_ context.Context, key []byte) (engine.Doc, error) {
	t.mu.RLock()
	d, ok := t.docs[string(key)]
	t.mu.RUnlock()
	if !ok {
		return engine.Doc{}, fmt.Errorf("table %s: key %x: %w", t.spec.Name, key, engine.ErrNotFound)
	}
	return d.Clone(), nil
}

// Query scans every document and returns copies of the page q selects, in
// the order of TableSpec.Before; Next is set when the page is full.
func (t *table) Query(ctx context.Context, q engine.IndexQuery) (engine.DocPage, error) {
	return t.QueryFiltered(ctx, q, nil)
}

// QueryFiltered is Query over the documents whose key keep accepts (nil
// accepts all): see engine.FilteredQuerier.
func (t *table) QueryFiltered(_ context.Context, q engine.IndexQuery, keep func(key []byte) bool) (engine.DocPage, error) {
	pos, kind, err := q.Validate(t.spec)
	if err != nil {
		return engine.DocPage{}, fmt.Errorf("query table %s: %w", t.spec.Name, err)
	}
	match := t.snapshot(func(d engine.Doc) bool {
		at := engine.IndexCursor{Value: d.Index[pos], Key: d.Key}
		return q.InRange(d.Index[pos], kind) && (keep == nil || keep(d.Key)) &&
			(q.After == nil || t.spec.Before(*q.After, at, kind, q.Desc))
	})
	slices.SortFunc(match, t.spec.DocOrder(pos, kind, q.Desc))
	var page engine.DocPage
	for _, d := range match[:min(len(match), q.Limit)] {
		page.Docs = append(page.Docs, d.Clone())
	}
	if len(page.Docs) == q.Limit {
		last := page.Docs[len(page.Docs)-1]
		page.Next = &engine.IndexCursor{Value: last.Index[pos], Key: bytes.Clone(last.Key)}
	}
	return page, nil
}

// snapshot returns the stored documents that keep accepts.
func (t *table) snapshot(keep func(engine.Doc) bool) []engine.Doc {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var docs []engine.Doc
	for _, d := range t.docs {
		if keep(d) {
			docs = append(docs, d)
		}
	}
	return docs
}

// ScanPartition calls fn with a copy of each document of partition p, in
// key order, until fn fails; fn may call the table (it reads a snapshot).
func (t *table) ScanPartition(_ context.Context, p int32, fn func(engine.Doc) error) error {
	docs := t.snapshot(func(d engine.Doc) bool { return d.Partition == p })
	slices.SortFunc(docs, func(a, b engine.Doc) int { return bytes.Compare(a.Key, b.Key) })
	for _, d := range docs {
		if err := fn(d.Clone()); err != nil {
			return err
		}
	}
	return nil
}

// Reset deletes every document and checkpoint and keeps the epochs, so a
// writer from before the reset stays fenced.
func (t *table) Reset(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.docs, t.ckpt = map[string]engine.Doc{}, map[int32]int64{}
	return nil
}
