package docstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/keepstate/keepstate/engine"
)

// Store is the Clover store of keepstate: the tables of one data
// directory (OpenTable). All methods are safe for concurrent use (except
// Close); writes are serialized and readers see only committed batches,
// each from one snapshot.
type Store struct {
	dir    string
	kv     kv
	lock   *dirLock
	sync   bool
	noBulk bool // the bulk-load path off (tests)
	guard  diskGuard
	log    *slog.Logger
	counts *readCounts

	// mu guards kv against Close: every operation holds it shared.
	mu     sync.RWMutex
	closed atomic.Bool

	// wmu serializes writes (and guards tcache's bulk loads).
	wmu sync.Mutex
	// ingestChunk is the bulk-load buffer's size that starts an ingestion.
	ingestChunk int
	// cacheMax bounds the write cache (WithWriteCache; 0: off), bulkMax
	// while a bulk load pins it (WithBulkMemory).
	cacheMax, bulkMax int
	tcache            tableCaches // the tables' write cache (table_cache.go)
	// learnt holds the write-cache updates of Loads that found wmu held
	// (underWriteLock); lmu guards it.
	lmu    sync.Mutex
	learnt []func()

	condemned   atomic.Pointer[error] // the error of every call once corrupt (corrupt.go)
	condemnedCh chan struct{}         // closed when condemned is set

	stopping atomic.Bool // Close has begun: warm-ups stop
}

// Chunk sizes of the tables' reads and writes.
const (
	// seekLoadMin is the smallest read (table.readDocs) done by one
	// iterator seeking its keys in order, reusing its position, rather
	// than by point reads.
	seekLoadMin = 16
	scanChunk   = 512    // documents ScanPartition loads per snapshot
	dropChunk   = 4096   // documents DropPartition reads (and holds) at a time
	warmChunk   = 20_000 // documents a warm-up adds per hold of the write lock
)

var _ engine.InstanceLocal = (*Store)(nil)

// InstanceLocal reports true: the store lives in this instance's data
// directory, so the engine may drop copies of partitions that moved to
// another instance (engine.Config.StaleDropAfter).
func (s *Store) InstanceLocal() bool { return true }

// Dir returns the data directory of the store.
func (s *Store) Dir() string { return s.dir }

// acquire takes the shared lock, or fails with ErrUnavailable once the
// store is closed, and with ErrCorrupt once it is condemned. The caller
// calls s.mu.RUnlock when it returns nil.
func (s *Store) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed.Load() {
		s.mu.RUnlock()
		return fmt.Errorf("docstore %s closed: %w", s.dir, engine.ErrUnavailable)
	}
	if err := s.CondemnedErr(); err != nil {
		s.mu.RUnlock()
		return err
	}
	return nil
}

// maxLearnt bounds the Loads waiting in Store.learnt.
const maxLearnt = 64

// underWriteLock runs learn (what a Load read, for a write cache) under
// wmu without waiting: at once when wmu is free, else queued for the write
// holding it to run as it ends (drainLearnt). A full queue drops learn:
// the cache only misses what it would have saved.
func (s *Store) underWriteLock(learn func()) {
	if s.wmu.TryLock() {
		learn()
		s.drainLearnt()
		s.wmu.Unlock()
		return
	}
	s.lmu.Lock()
	if len(s.learnt) < maxLearnt {
		s.learnt = append(s.learnt, learn)
	}
	s.lmu.Unlock()
}

// drainLearnt runs the Loads' updates waiting in s.learnt, under wmu.
func (s *Store) drainLearnt() {
	s.lmu.Lock()
	waiting := s.learnt
	s.learnt = nil
	s.lmu.Unlock()
	for _, learn := range waiting {
		learn()
	}
}
