package docstore

import (
	"time"
)

// warmChunk is how many documents warm adds per hold of the write lock.
const warmChunk = 20_000

// warm fills the write cache from the documents (one key range; each
// holds its movie's partition, average and version) in the background
// after Open, so that the first batches after a restart write without
// reading. It reads one snapshot and adds, under the write lock, only
// movies the cache does not hold yet (a batch committed since the snapshot
// put the newer state there); a drop or reset (gen moved) or an eviction
// since the snapshot makes the snapshot stale and stops it. It stops when
// the cache is full or Close begins, and closes s.warmed when it returns.
func (s *Store) warm() {
	defer close(s.warmed)
	if s.priors.max == 0 {
		return
	}
	s.mu.RLock() // Close waits (stopping makes that short)
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return
	}
	start := time.Now()
	s.wmu.Lock()
	gen, removals := s.gen, s.priors.removals.count()
	snap := s.kv.snapshot()
	s.wmu.Unlock()
	defer snap.release()
	prefix := nsKey(nsClover, docKeyPrefix)
	it, err := snap.iter(prefix, prefixUpper(prefix), false)
	if err != nil {
		s.log.Warn("docstore write cache not filled", "err", err)
		return
	}
	defer func() {
		if err := it.close(); err != nil { // the entries before it are good
			s.log.Warn("docstore write cache: warm-up stopped", "err", s.corrupt(err))
		}
	}()
	type entry struct {
		id int64
		p  prior
	}
	chunk := make([]entry, 0, warmChunk)
	added := 0
	flush := func() bool {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		// An entry that left the cache since the snapshot may have been
		// written since (priorCache.learn): the snapshot is stale.
		if s.gen != gen || s.priors.removals.count() != removals || s.stopping.Load() || s.job != nil || !s.buf.empty() {
			return false // a bulk load runs: it fills the cache itself
		}
		for _, e := range chunk {
			if _, _, cached := s.priors.lookup(e.id); !cached && !s.priors.full() {
				s.priors.put(e.id, e.p)
				added++
			}
		}
		chunk = chunk[:0]
		return !s.priors.full()
	}
	for ok := it.seek(prefix); ok; ok = it.next() {
		m, err := decodeDoc(it.value())
		if err != nil {
			s.log.Warn("docstore write cache: malformed document", "key", it.key(), "err", err)
			return
		}
		chunk = append(chunk, entry{m.MovieID, priorOf(m)})
		if len(chunk) == warmChunk && !flush() {
			return
		}
	}
	flush()
	s.log.Info("docstore write cache filled", "movies", added, "took", time.Since(start))
}

// Warmed returns a channel closed once the write cache has been filled
// after Open (or filling stopped: cache full, Close, a drop or reset).
// Until then the store answers and writes normally; applies just read
// the movies the cache does not hold yet. Safe for concurrent use.
func (s *Store) Warmed() <-chan struct{} { return s.warmed }
