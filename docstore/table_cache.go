package docstore

import (
	"slices"

	"github.com/keepstate/keepstate/engine"
)

// tableCaches is the write cache of tables, the table form of priorCache:
// for keys a table has read or written, what the next write of the key
// needs (tablePrior: whether it exists, its version, partition and index
// values), so that Apply writes those keys without reading their
// documents (an LSM read is a search through levels; the write is an
// append). One tableCache per table name, shared by every handle of the
// table. It mirrors the committed state: entries change only after a
// batch commits, Load adds only what it read for keys not removed since
// its snapshot (learn), and a drop or reset removes its table's. All
// tables together hold at most limit entries (WithWriteCache, the movies'
// bound, counted apart from them); once full, a new key evicts an eighth
// of its table's entries. Guarded by Store.wmu, but for each table's
// removal count.
type tableCaches struct {
	byName map[string]*tableCache
	n      int
}

// tableCache is one table's write cache.
type tableCache struct {
	m map[string]tablePrior
	// removals counts the times entries left m or a written key found no
	// room (evictions, drops, resets, failed commits) and remembers which
	// keys the last ones took out: its count is read without wmu by Load
	// before its snapshot, for learn.
	removals removalLog[string]
}

// of returns the cache of table name, creating it.
func (c *tableCaches) of(name string) *tableCache {
	if c.byName == nil {
		c.byName = map[string]*tableCache{}
	}
	tc := c.byName[name]
	if tc == nil {
		tc = &tableCache{m: map[string]tablePrior{}}
		c.byName[name] = tc
	}
	return tc
}

// put records p for key in tc (after a commit wrote it). When the caches
// are full it first evicts an eighth of tc; when that makes no room (other
// tables hold the entries) key stays out, logged as removed, so that no
// Load from before the write can add its older state.
func (c *tableCaches) put(tc *tableCache, key string, p tablePrior, limit int) {
	if _, ok := tc.m[key]; ok {
		tc.m[key] = p
		return
	}
	if c.n >= limit {
		c.evict(tc, limit/8)
		if c.n >= limit {
			tc.removals.removed([]string{key})
			return
		}
	}
	tc.m[key] = p
	c.n++
}

// evict removes at least one and up to n entries of tc, in the map's
// (random) order.
func (c *tableCaches) evict(tc *tableCache, n int) {
	keys := make([]string, 0, min(max(n, 1), len(tc.m)))
	for k := range tc.m {
		if len(keys) == cap(keys) {
			break
		}
		delete(tc.m, k)
		keys = append(keys, k)
	}
	c.n -= len(keys)
	tc.removals.removed(keys)
}

// learn adds entries (keys a Load read, from a snapshot taken when tc's
// removal count was before) to tc, for the keys it does not hold and did
// not remove since. The caches hold every key written since any snapshot
// unless its entry left since (put, evict, forget and clear log it): so a
// key tc does not hold, and did not remove since the snapshot, was not
// written since, and what the snapshot says of it is current. Nothing is
// learned when the log no longer reaches back to the snapshot or tc was
// emptied since. The keys are chosen before an eviction makes room for
// them.
func (c *tableCaches) learn(tc *tableCache, before uint64, entries []cached, limit int) {
	if limit == 0 {
		return
	}
	since, ok := tc.removals.since(before)
	if !ok {
		return
	}
	fresh := entries[:0:0]
	for _, e := range entries {
		if _, ok := tc.m[e.key]; !ok && !since.has(e.key) {
			fresh = append(fresh, e)
		}
	}
	if over := c.n + len(fresh) - limit; over > 0 && len(tc.m) > 0 {
		c.evict(tc, min(len(tc.m), max(over, limit/8)))
	}
	for _, e := range fresh {
		if c.n >= limit {
			return
		}
		tc.m[e.key] = e.p
		c.n++
	}
}

// forget removes keys from tc (a partition dropped). It logs the removal
// as of every key, which refuses what Loads in flight read: a drop is
// rare, and naming its keys would copy every one of them.
func (c *tableCaches) forget(tc *tableCache, keys [][]byte) {
	for _, k := range keys {
		if _, ok := tc.m[string(k)]; ok {
			delete(tc.m, string(k))
			c.n--
		}
	}
	tc.removals.removedAll()
}

// clear empties tc.
func (c *tableCaches) clear(tc *tableCache) {
	c.n -= len(tc.m)
	clear(tc.m)
	tc.removals.removedAll()
}

// clearAll empties every table's cache (a commit that failed may have
// been written after all).
func (c *tableCaches) clearAll() {
	for _, tc := range c.byName {
		c.clear(tc)
	}
}

// cached is a key's state after a batch, for the write cache.
type cached struct {
	key string
	p   tablePrior
}

// learn adds what a Load read (found, by key; absent keys as absent) to
// the table's write cache; before is the caches' removal count read before
// the Load's snapshot (tableCaches.learn says why that makes the read safe
// to keep). It never waits for wmu (Store.underWriteLock).
func (t *table) learn(before uint64, keys [][]byte, found map[string]engine.Doc) {
	s := t.s
	if s.priors.max == 0 {
		return
	}
	entries := make([]cached, 0, len(keys))
	for _, k := range keys {
		p := tablePrior{}
		if d, ok := found[string(k)]; ok {
			p = tablePrior{exists: true, version: d.Version, part: d.Partition, index: slices.Clone(d.Index)}
		}
		entries = append(entries, cached{string(k), p})
	}
	s.underWriteLock(func() { s.tcache.learn(t.cache, before, entries, s.priors.max) })
}
