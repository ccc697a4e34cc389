package docstore

import (
	"time"
)

// warm fills the table's write cache from its documents in the background
// when the table is first opened, so that the first batches after a
// restart write without reading and the first Loads answer from memory.
// From one snapshot it adds, under the write lock, entries only for keys
// the cache does not hold (a batch since put the newer state there), as
// long as no entry has left the cache since the snapshot (which makes it
// stale). It never evicts: it stops when the caches are full, a bulk load
// runs or Close begins, and closes the cache's warmed channel.
func (t *table) warm() {
	s, tc := t.s, t.cache
	defer close(tc.warmed)
	limit := s.cacheMax
	if limit == 0 {
		return
	}
	s.mu.RLock() // Close waits (stopping makes that short)
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return
	}
	start := time.Now()
	s.wmu.Lock()
	removals := tc.removals.count()
	busy := tc.bulk.on || tc.buffered.Load()
	snap := s.kv.snapshot()
	s.wmu.Unlock()
	defer snap.release()
	if busy {
		return // a bulk load fills the cache itself
	}
	prefix := t.l.docs
	it, err := snap.iter(prefix, prefixUpper(prefix), false)
	if err != nil {
		s.log.Warn("docstore table write cache not filled", "table", t.spec.Name, "err", err)
		return
	}
	defer func() {
		if err := it.close(); err != nil { // the entries before it are good
			s.log.Warn("docstore table write cache: warm-up stopped", "table", t.spec.Name, "err", s.corrupt(err))
		}
	}()
	chunk := make([]cached, 0, warmChunk)
	added := 0
	flush := func() bool {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		if tc.removals.count() != removals || s.stopping.Load() || tc.bulk.on || tc.buffered.Load() {
			return false
		}
		s.tcache.mu.Lock()
		defer s.tcache.mu.Unlock()
		for _, e := range chunk {
			if s.tcache.full(tc, limit) {
				return false
			}
			if !tc.m.has(e.key) {
				tc.m.set(e.key, e.p)
				s.tcache.n++
				added++
			}
		}
		chunk = chunk[:0]
		return !s.tcache.full(tc, limit)
	}
	for ok := it.seek(prefix); ok; ok = it.next() {
		d, err := decodeTableDoc(it.value(), t.spec, false)
		if err != nil {
			s.log.Warn("docstore table write cache: malformed document", "table", t.spec.Name, "key", it.key(), "err", err)
			return
		}
		chunk = append(chunk, cached{string(d.Key), docPrior(t.spec, d)})
		if len(chunk) == warmChunk && !flush() {
			s.log.Info("docstore table write cache filled", "table", t.spec.Name, "docs", added, "took", time.Since(start))
			return
		}
	}
	flush()
	s.log.Info("docstore table write cache filled", "table", t.spec.Name, "docs", added, "took", time.Since(start))
}
