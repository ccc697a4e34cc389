package memstore

import (
	"sync"

	"github.com/keepstate/keepstate/engine"
)

// Store is an in-memory engine.Tables: its tables (OpenTable) live as long
// as the Store. It is safe for concurrent use. The zero value is not
// usable; call New.
type Store struct {
	local  bool
	mu     sync.Mutex
	tables map[string]*table // by name; see OpenTable
}

var (
	_ engine.Tables        = (*Store)(nil)
	_ engine.InstanceLocal = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// Local makes the store's tables report themselves as InstanceLocal (the
// engine then drops a partition's documents some time after the partition
// moved away, as it does for docstore). By default a Store behaves like a
// shared store.
func Local() Option { return func(s *Store) { s.local = true } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{}
	for _, o := range opts {
		o(s)
	}
	return s
}

// InstanceLocal reports whether Local was given.
func (s *Store) InstanceLocal() bool { return s.local }

// Close does nothing: the tables stay readable.
func (s *Store) Close() error { return nil }
