package memstore

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/keepstate/keepstate/engine"
)

// Store is an in-memory engine.Store with the PartitionScanner and
// Resetter abilities. It is safe for concurrent use: every method holds
// one lock, so readers never see a partly applied batch. The zero value is
// not usable; call New.
type Store struct {
	mu     sync.RWMutex
	docs   map[int64]engine.MovieStats
	ckpt   map[int32]int64
	epochs map[int32]int64
	local  bool
	// tables are the Store's tables (see OpenTable).
	tables tableSet
}

var (
	_ engine.Store            = (*Store)(nil)
	_ engine.PartitionScanner = (*Store)(nil)
	_ engine.Resetter         = (*Store)(nil)
	_ engine.InstanceLocal    = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// Local makes the store report itself as InstanceLocal (the engine then
// drops a partition's documents some time after the partition moved away,
// as it does for docstore). By default a Store behaves like a shared store.
func Local() Option { return func(s *Store) { s.local = true } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{docs: map[int64]engine.MovieStats{}, ckpt: map[int32]int64{}, epochs: map[int32]int64{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// InstanceLocal reports whether Local was given.
func (s *Store) InstanceLocal() bool { return s.local }

// Claim raises partition p's epoch and returns it.
func (s *Store) Claim(_ context.Context, p int32) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epochs[p]++
	return s.epochs[p], nil
}

// Checkpoint returns partition p's checkpoint; ok is false when none was
// written.
func (s *Store) Checkpoint(_ context.Context, p int32) (int64, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n, ok := s.ckpt[p]
	return n, ok, nil
}

// Load returns copies of the stored documents of ids; missing ids are
// absent from the map.
func (s *Store) Load(_ context.Context, ids []int64) (map[int64]engine.MovieStats, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[int64]engine.MovieStats, len(ids))
	for _, id := range ids {
		if m, ok := s.docs[id]; ok {
			out[id] = m.Clone()
		}
	}
	return out, nil
}

// Apply writes b atomically, following engine.Store's contract: ErrFenced
// for a stale or unclaimed epoch or (unless b.Replay) a version that is not
// newer than the stored one; ErrInvalid for a document that fails
// Validate. Nothing is written when it fails.
func (s *Store) Apply(_ context.Context, b engine.Batch) error {
	for _, d := range b.Docs {
		if err := d.Validate(); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.Epoch == 0 || b.Epoch != s.epochs[b.Partition] {
		return engine.ErrFenced
	}
	pending := make(map[int64]engine.MovieStats, len(b.Docs))
	for _, d := range b.Docs {
		old, ok := pending[d.MovieID]
		if !ok {
			old, ok = s.docs[d.MovieID]
		}
		if ok && d.Version <= old.Version {
			if b.Replay {
				continue
			}
			return engine.ErrFenced
		}
		pending[d.MovieID] = d.Clone()
	}
	for id, d := range pending {
		s.docs[id] = d
	}
	s.ckpt[b.Partition] = b.Checkpoint
	return nil
}

// DropPartition deletes partition p's documents and checkpoint; its epoch
// stays.
func (s *Store) DropPartition(_ context.Context, p int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, d := range s.docs {
		if d.Partition == p {
			delete(s.docs, id)
		}
	}
	delete(s.ckpt, p)
	return nil
}

// Close does nothing (there is nothing to release); the data stays
// readable.
func (s *Store) Close() error { return nil }

// Get returns a copy of movieID's document, or engine.ErrNotFound.
func (s *Store) Get(_ context.Context, movieID int64) (engine.MovieStats, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.docs[movieID]
	if !ok {
		return engine.MovieStats{}, engine.ErrNotFound
	}
	return m.Clone(), nil
}

// Range scans every document and returns the page q selects, in the range
// order (average descending, then movie id ascending).
func (s *Store) Range(_ context.Context, q engine.RangeQuery) (engine.Page, error) {
	if err := q.Validate(); err != nil {
		return engine.Page{}, err
	}
	s.mu.RLock()
	var all []engine.MovieStats
	for _, m := range s.docs {
		a := m.Avg()
		if a < q.MinAvg || a > q.MaxAvg {
			continue
		}
		if q.After != nil && !q.After.Before(cursorOf(m)) {
			continue
		}
		all = append(all, m.Clone())
	}
	s.mu.RUnlock()
	slices.SortFunc(all, func(x, y engine.MovieStats) int {
		cx, cy := cursorOf(x), cursorOf(y)
		switch {
		case cx.Before(cy):
			return -1
		case cy.Before(cx):
			return 1
		}
		return 0
	})
	var page engine.Page
	if len(all) > q.Limit {
		all = all[:q.Limit]
		c := cursorOf(all[len(all)-1])
		page.Next = &c
	}
	page.Movies = all
	return page, nil
}

func cursorOf(m engine.MovieStats) engine.Cursor {
	return engine.Cursor{Avg: m.Avg(), MovieID: m.MovieID}
}

// ScanPartition calls fn with a copy of each document of partition p, in
// movie id order, stopping at fn's first error. fn may call the store.
func (s *Store) ScanPartition(_ context.Context, p int32, fn func(engine.MovieStats) error) error {
	s.mu.RLock()
	var docs []engine.MovieStats
	for _, d := range s.docs {
		if d.Partition == p {
			docs = append(docs, d.Clone())
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(docs, func(a, b engine.MovieStats) int { return cmp.Compare(a.MovieID, b.MovieID) })
	for _, d := range docs {
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

// Reset deletes every document and checkpoint and keeps the epochs, so a
// writer from before the reset stays fenced.
func (s *Store) Reset(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs, s.ckpt = map[int64]engine.MovieStats{}, map[int32]int64{}
	return nil
}
