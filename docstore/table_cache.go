package docstore

import (
	"slices"
	"sync/atomic"

	"github.com/keepstate/keepstate/engine"
)

// tableCaches is the write cache of tables, the table form of priorCache:
// for keys a table has read or written, what the next write of the key
// needs (tablePrior: whether it exists, its version, partition and index
// values), so that Apply writes those keys without reading their
// documents (an LSM read is a search through levels; the write is an
// append). One cache per table name, shared by every handle of the
// table. It mirrors the committed state: entries change only after a
// batch commits, Load adds only what it read while no entry left
// (learn), and a drop or reset removes its table's. All tables together
// hold at most limit entries (WithWriteCache, the movies' bound, counted
// apart from them); once full, a new key evicts an eighth of its table's
// entries. Guarded by Store.wmu, but for removals.
type tableCaches struct {
	byName map[string]map[string]tablePrior
	n      int
	// removals counts the times entries left the caches or a written key
	// found no room (evictions, drops, resets, failed commits): read
	// without wmu by Load before its snapshot, for learn.
	removals atomic.Uint64
}

// of returns the cache of table name, creating it.
func (c *tableCaches) of(name string) map[string]tablePrior {
	if c.byName == nil {
		c.byName = map[string]map[string]tablePrior{}
	}
	m := c.byName[name]
	if m == nil {
		m = map[string]tablePrior{}
		c.byName[name] = m
	}
	return m
}

// put records p for key in m (after a commit wrote it). When the caches
// are full it first evicts an eighth of m; when that makes no room (other
// tables hold the entries) key stays out, counted as a removal, so that
// no Load from before the write can add its older state.
func (c *tableCaches) put(m map[string]tablePrior, key string, p tablePrior, limit int) {
	if _, ok := m[key]; ok {
		m[key] = p
		return
	}
	if c.n >= limit {
		c.evict(m, limit/8)
		if c.n >= limit {
			c.removals.Add(1)
			return
		}
	}
	m[key] = p
	c.n++
}

// evict removes at least one and up to n entries of m, in the map's
// (random) order.
func (c *tableCaches) evict(m map[string]tablePrior, n int) {
	c.removals.Add(1)
	n = max(n, 1)
	for k := range m {
		if n == 0 {
			return
		}
		delete(m, k)
		c.n--
		n--
	}
}

// learn adds entries (keys a Load read, from a snapshot taken when
// removals was before) to m, for the keys it does not hold. The caches
// hold every key written since any snapshot unless an entry left since
// (put, evict, forget, clear all count): so while removals is still
// before, a key m does not hold was not written since the snapshot, and
// what the snapshot says of it is current. The keys are chosen before an
// eviction makes room for them.
func (c *tableCaches) learn(m map[string]tablePrior, before uint64, entries []cached, limit int) {
	if limit == 0 || c.removals.Load() != before {
		return
	}
	fresh := entries[:0:0]
	for _, e := range entries {
		if _, ok := m[e.key]; !ok {
			fresh = append(fresh, e)
		}
	}
	if over := c.n + len(fresh) - limit; over > 0 {
		c.evict(m, min(len(m), max(over, limit/8)))
	}
	for _, e := range fresh {
		if c.n >= limit {
			return
		}
		m[e.key] = e.p
		c.n++
	}
}

// forget removes key from m.
func (c *tableCaches) forget(m map[string]tablePrior, key string) {
	c.removals.Add(1)
	if _, ok := m[key]; ok {
		delete(m, key)
		c.n--
	}
}

// clear empties m.
func (c *tableCaches) clear(m map[string]tablePrior) {
	c.removals.Add(1)
	c.n -= len(m)
	clear(m)
}

// clearAll empties every table's cache (a commit that failed may have
// been written after all).
func (c *tableCaches) clearAll() {
	for _, m := range c.byName {
		c.clear(m)
	}
	c.removals.Add(1)
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
	s.underWriteLock(func() { s.tcache.learn(s.tcache.of(t.spec.Name), before, entries, s.priors.max) })
}
