package storetest

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// memStore is the simplest correct store: a map under a lock. The suite
// runs against it to check the suite itself.
type memStore struct {
	mu     sync.RWMutex
	docs   map[int64]engine.MovieStats
	ckpt   map[int32]int64
	epochs map[int32]int64
}

var (
	_ engine.Store            = (*memStore)(nil)
	_ engine.PartitionScanner = (*memStore)(nil)
	_ engine.Resetter         = (*memStore)(nil)
)

func newMem() *memStore {
	return &memStore{docs: map[int64]engine.MovieStats{}, ckpt: map[int32]int64{}, epochs: map[int32]int64{}}
}

func (s *memStore) Claim(_ context.Context, p int32) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epochs[p]++
	return s.epochs[p], nil
}

func (s *memStore) Checkpoint(_ context.Context, p int32) (int64, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n, ok := s.ckpt[p]
	return n, ok, nil
}

func (s *memStore) Load(_ context.Context, ids []int64) (map[int64]engine.MovieStats, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[int64]engine.MovieStats{}
	for _, id := range ids {
		if m, ok := s.docs[id]; ok {
			out[id] = m.Clone()
		}
	}
	return out, nil
}

func (s *memStore) Apply(_ context.Context, b engine.Batch) error {
	for _, d := range b.Docs {
		if err := d.Validate(); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.Epoch != s.epochs[b.Partition] || b.Epoch == 0 {
		return engine.ErrFenced
	}
	pending := map[int64]engine.MovieStats{}
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

func (s *memStore) DropPartition(_ context.Context, p int32) error {
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

func (s *memStore) Close() error { return nil }

func (s *memStore) Get(_ context.Context, id int64) (engine.MovieStats, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.docs[id]
	if !ok {
		return engine.MovieStats{}, engine.ErrNotFound
	}
	return m.Clone(), nil
}

func (s *memStore) Range(_ context.Context, q engine.RangeQuery) (engine.Page, error) {
	if err := q.Validate(); err != nil {
		return engine.Page{}, err
	}
	s.mu.RLock()
	md := model{}
	for id, m := range s.docs {
		md[id] = m.Clone()
	}
	s.mu.RUnlock()
	all := md.query(q)
	var page engine.Page
	if len(all) > q.Limit {
		all = all[:q.Limit]
		c := cursorOf(all[len(all)-1])
		page.Next = &c
	}
	page.Movies = all
	return page, nil
}

func (s *memStore) ScanPartition(_ context.Context, p int32, fn func(engine.MovieStats) error) error {
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

func (s *memStore) Reset(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs, s.ckpt = map[int64]engine.MovieStats{}, map[int32]int64{}
	return nil
}

func TestSuiteOnMemStore(t *testing.T) {
	Run(t, func(t *testing.T) engine.Store { return newMem() })
}
