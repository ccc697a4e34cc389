package docstore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// tableCaches is the write cache of tables (tablePrior per key), so that
// Apply writes cached keys without reading their documents (an LSM read
// searches levels; the write is an append) and Load answers them without
// a read. One tableCache per table name, shared by its handles. It mirrors
// the committed state: entries change only after a batch commits (or an
// ingestion lands); Load adds only what it read for keys not removed since
// its snapshot (learn), warm-up only while nothing left the cache; a drop
// or reset removes its table's. All tables together hold at most limit
// entries (WithWriteCache); once full, a new key evicts an eighth of its
// table's. A bulk load pins its table's cache: nothing is evicted, up to
// the bulk bound (WithBulkMemory), until it ends.
//
// Concurrency: every change holds Store.wmu and mu; readers hold either
// (Load holds mu's read lock, never waiting for a write's commit). A
// batch is visible in the store before its entries are in the cache, so
// every change of a table's documents runs between begin and end, which
// make seq odd meanwhile, and serve answers only when seq was even before
// the Load's snapshot and still is (a sequence lock).
type tableCaches struct {
	mu      sync.RWMutex
	byName  map[string]*tableCache
	n       int
	bulkMax int           // the most entries while a table's cache is pinned
	idle    time.Duration // the bulk-load buffer's idle wait; zero: ingestIdle (tests set more)
}

// tableCache is one table's write cache and the state of its bulk load.
// Its entries are guarded as tableCaches says; bulk by Store.wmu.
type tableCache struct {
	m priorSlab
	// removals logs the times entries left m or a written key found no
	// room (evictions, drops, resets, failed commits), for learn.
	removals removalLog[string]
	seq      atomic.Uint64 // odd while the table's documents change (begin, end)
	pinned   bool          // a bulk load runs: no eviction
	bulk     tableBulk     // table_bulk.go
	buffered atomic.Bool   // bulk holds batches not written out: reads write them out first
	warmed   chan struct{} // closed when warm-up has ended (table_warm.go)
}

// open returns the cache of table name and whether it is new; bulkMax is
// the store's bulk bound (see limitOf). The caller holds wmu.
func (c *tableCaches) open(name string, bulkMax int) (*tableCache, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bulkMax = bulkMax
	if c.byName == nil {
		c.byName = map[string]*tableCache{}
	}
	tc := c.byName[name]
	if tc == nil {
		tc = &tableCache{warmed: make(chan struct{})}
		c.byName[name] = tc
		return tc, true
	}
	return tc, false
}

// limitOf is the most entries the caches may hold when one is added to
// tc: limit, or the bulk bound while tc is pinned.
func (c *tableCaches) limitOf(tc *tableCache, limit int) int {
	if tc.pinned && limit > 0 {
		return max(limit, c.bulkMax)
	}
	return limit
}

// full reports whether tc can take no new key.
func (c *tableCaches) full(tc *tableCache, limit int) bool { return c.n >= c.limitOf(tc, limit) }

// putAll records entries in tc (after a commit wrote them), as put does.
func (c *tableCaches) putAll(tc *tableCache, entries []cached, limit int) {
	if len(entries) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range entries {
		c.put(tc, e.key, e.p, limit)
	}
}

// put records p for key in tc. When the caches are full it first evicts
// an eighth of tc (not when pinned); when that makes no room key stays
// out, logged as removed, so that no Load from before the write can add
// its older state. The caller holds mu.
func (c *tableCaches) put(tc *tableCache, key string, p tablePrior, limit int) {
	if tc.m.has(key) {
		tc.m.set(key, p)
		return
	}
	if lim := c.limitOf(tc, limit); c.n >= lim {
		if !tc.pinned {
			c.evict(tc, limit/8)
		}
		if c.n >= lim {
			tc.removals.removed([]string{key})
			if tc.pinned {
				tc.bulk.overflow = true // the load no longer knows every document
			}
			return
		}
	}
	tc.m.set(key, p)
	c.n++
}

// evict removes at least one and up to n entries of tc (priorSlab.evict).
// The caller holds mu.
func (c *tableCaches) evict(tc *tableCache, n int) {
	keys := tc.m.evict(n)
	c.n -= len(keys)
	tc.removals.removed(keys)
}

// learn adds entries (keys a Load read, from a snapshot taken when tc's
// removal count was before) to tc, for the keys it does not hold and did
// not remove since: the caches hold every key written since any snapshot
// unless its entry left since (which is logged), so the snapshot's state
// of such a key is current. Nothing is learned when the log no longer
// reaches back to the snapshot, nor while tc is pinned. The keys are
// chosen before an eviction makes room for them.
func (c *tableCaches) learn(tc *tableCache, before uint64, entries []cached, limit int) {
	if limit == 0 || tc.pinned {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	since, ok := tc.removals.since(before)
	if !ok {
		return
	}
	fresh := entries[:0:0]
	for _, e := range entries {
		if !tc.m.has(e.key) && !since.has(e.key) {
			fresh = append(fresh, e)
		}
	}
	if over := c.n + len(fresh) - limit; over > 0 && tc.m.len() > 0 {
		c.evict(tc, min(tc.m.len(), max(over, limit/8)))
	}
	for _, e := range fresh {
		if c.n >= limit {
			return
		}
		tc.m.set(e.key, e.p)
		c.n++
	}
}

// forget removes keys from tc (a partition dropped), logged as a removal
// of every key (a drop is rare; naming its keys would copy them all).
func (c *tableCaches) forget(tc *tableCache, keys [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if tc.m.del(string(k)) {
			c.n--
		}
	}
	tc.removals.removedAll()
}

// clear empties tc.
func (c *tableCaches) clear(tc *tableCache) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked(tc)
}

// clearLocked is clear with mu held.
func (c *tableCaches) clearLocked(tc *tableCache) {
	c.n -= tc.m.len()
	tc.m = priorSlab{} // a slab keeps its memory after deletes
	tc.removals.removedAll()
}

// clearAll empties every table's cache (a commit that failed may have
// been written after all).
func (c *tableCaches) clearAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tc := range c.byName {
		c.clearLocked(tc)
	}
}

// pin empties tc and stops its eviction, for a bulk load.
func (c *tableCaches) pin(tc *tableCache) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked(tc)
	tc.pinned = true
}

// unpin ends tc's pin; when the caches hold more than limit, tc keeps what
// fits in a new slab.
func (c *tableCaches) unpin(tc *tableCache, limit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tc.pinned = false
	if c.n <= limit {
		return
	}
	others := c.n - tc.m.len()
	room := max(limit-others, 0)
	var kept priorSlab
	for k, p := range tc.m.all() {
		if kept.len() == room {
			break
		}
		kept.set(k, p)
	}
	tc.m = kept
	c.n = others + kept.len()
	tc.removals.removedAll()
}

// begin and end bracket a change of tc's table's documents, from before
// it is visible until the cache holds its result (or was emptied): tc
// answers no Load meanwhile. The caller holds wmu.
func (tc *tableCache) begin() { tc.seq.Add(1) }

func (tc *tableCache) end() { tc.seq.Add(1) }

// serve puts into out the documents of keys (sorted, no repeats) that tc
// can rebuild (whole entries) and returns the other keys, in order, to read
// from the snapshot; a key tc knows to be absent is neither. seq is tc.seq
// before the snapshot: if a change was under way then, or began since,
// serve answers nothing. It holds mu's read lock, never wmu.
func (c *tableCaches) serve(tc *tableCache, spec engine.TableSpec, seq uint64, keys [][]byte, out map[string]engine.Doc) (rest [][]byte) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if tc.m.len() == 0 || seq%2 != 0 || tc.seq.Load() != seq {
		return keys
	}
	for _, k := range keys {
		p, ok := tc.m.get(string(k))
		switch {
		case ok && !p.exists:
		case ok && p.whole:
			out[string(k)] = p.doc(spec, string(k))
		default:
			rest = append(rest, k)
		}
	}
	return rest
}

// cached is a key's state after a batch, for the write cache.
type cached struct {
	key string
	p   tablePrior
}

// learn adds what a Load read (keys, found by key; the others as absent)
// to the table's write cache; before is the cache's removal count before
// the Load's snapshot (tableCaches.learn). It never waits for wmu.
func (t *table) learn(before uint64, keys [][]byte, found map[string]engine.Doc) {
	s := t.s
	if s.cacheMax == 0 || len(keys) == 0 {
		return
	}
	entries := make([]cached, 0, len(keys))
	for _, k := range keys {
		p := tablePrior{}
		if d, ok := found[string(k)]; ok {
			p = docPrior(t.spec, d)
		}
		entries = append(entries, cached{string(k), p})
	}
	s.underWriteLock(func() { s.tcache.learn(t.cache, before, entries, s.cacheMax) })
}
