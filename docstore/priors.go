package docstore

// priorCache remembers, for movies the store has read or written, what the
// next write of the movie needs (its version, average and partition, or
// that the movie is absent), so that Apply writes without reading: an LSM
// write is an append, a read is a search through levels. It mirrors the
// committed state: entries change only after a batch commits, Load adds
// only what it read while no write committed (Store.learn), DropPartition
// and Reset remove theirs, and a failed commit empties it.
//
// It holds at most max entries (WithWriteCache, about 50 bytes each).
// Once full, a new entry evicts an eighth of the cache, in the map's
// (random) order: the cache serves the movies the engine is working on,
// which it has just loaded or written, not the whole store. A bulk load
// pins it (pin): nothing is evicted, because the load takes a movie the
// cache does not know for a new one, and the cache may grow to bulkMax;
// when it is full the load ends, and unpin shrinks it back to max. A crash
// loses it; the reopened store fills it again as it reads (and warm fills
// it from the documents). Guarded by Store.wmu.
type priorCache struct {
	m      map[int64]prior
	max    int
	pinned bool
	// bulkMax is the most entries while pinned (see limit).
	bulkMax int
	// removals counts the times entries left the cache (evictions, drops,
	// resets, pins) and remembers which movies the last ones took out:
	// its count is read without wmu by Load before its snapshot, for
	// Store.learn.
	removals removalLog[int64]
}

// defaultBulkMax is the most movies the prior cache holds while a bulk
// load pins it (unless WithWriteCache asks for more, or WithBulkMemory
// for less): a restore of up to this many movies into an empty store
// reads nothing.
const defaultBulkMax = 2_000_000

func newPriorCache(max, bulkMax int) *priorCache {
	return &priorCache{m: map[int64]prior{}, max: max, bulkMax: bulkMax}
}

// get returns what the cache knows of a movie the store holds; ok is false
// when the cache does not know the movie or knows it is absent.
func (c *priorCache) get(id int64) (prior, bool) {
	p, ok := c.m[id]
	return p, ok && !p.absent
}

// lookup returns what the cache knows of id: cached is false when it knows
// nothing, exists false when it knows the store has no such movie.
func (c *priorCache) lookup(id int64) (p prior, exists, cached bool) {
	p, cached = c.m[id]
	return p, cached && !p.absent, cached
}

// limit is the most entries the cache holds now.
func (c *priorCache) limit() int {
	if c.pinned && c.max > 0 {
		return max(c.max, c.bulkMax)
	}
	return c.max
}

// put records p for id, evicting other movies when the cache is full, or,
// pinned and full, only if it already holds id.
func (c *priorCache) put(id int64, p prior) {
	if _, ok := c.m[id]; ok {
		c.m[id] = p
		return
	}
	if len(c.m) >= c.limit() {
		if c.pinned || c.max == 0 {
			return
		}
		c.evict(max(c.max/8, 1))
	}
	c.m[id] = p
}

// evict removes n entries.
func (c *priorCache) evict(n int) {
	ids := make([]int64, 0, min(n, len(c.m)))
	for id := range c.m {
		if len(ids) == n {
			break
		}
		delete(c.m, id)
		ids = append(ids, id)
	}
	c.removals.removed(ids)
}

// forget removes ids (a partition dropped), as one removal; it sorts
// ids in place.
func (c *priorCache) forget(ids []int64) {
	for _, id := range ids {
		delete(c.m, id)
	}
	c.removals.removed(ids)
}

// clear empties the cache, releasing its memory.
func (c *priorCache) clear() {
	c.m = map[int64]prior{}
	c.removals.removedAll()
}

// learn adds entries, read from a snapshot taken when removals was
// before, for the movies the cache does not know. The cache holds every
// movie written since any snapshot (a write puts each movie it wrote once
// it has committed), unless its entry left since: so a movie the cache
// does not know, and did not remove since the snapshot, was not written
// since, and what the snapshot says of it is current. A movie removed
// since is not learned (it may have been written, then removed); nothing
// is when the log of removals does not reach back to the snapshot or the
// cache was emptied since. The movies are chosen before any eviction makes
// room for them. Not while pinned.
func (c *priorCache) learn(before uint64, entries []written) {
	if c.pinned || c.max == 0 {
		return
	}
	since, ok := c.removals.since(before)
	if !ok {
		return
	}
	fresh := entries[:0:0]
	for _, e := range entries {
		if _, ok := c.m[e.id]; !ok && !since.has(e.id) {
			fresh = append(fresh, e)
		}
	}
	fresh = fresh[:min(len(fresh), c.max)]
	if over := len(c.m) + len(fresh) - c.max; over > 0 {
		c.evict(max(over, c.max/8))
	}
	for _, e := range fresh {
		c.m[e.id] = e.p
	}
}

func (c *priorCache) len() int { return len(c.m) }

func (c *priorCache) full() bool { return len(c.m) >= c.limit() }

// pin empties the cache and stops eviction for a bulk load.
func (c *priorCache) pin() {
	c.clear()
	c.pinned = true
}

// unpin ends a bulk load's pin; a cache grown past max is shrunk to it in
// a new map (a Go map keeps its memory after deletes).
func (c *priorCache) unpin() {
	c.pinned = false
	if len(c.m) <= c.max {
		return
	}
	kept := make(map[int64]prior, c.max)
	for id, p := range c.m {
		if len(kept) == c.max {
			break
		}
		kept[id] = p
	}
	c.m = kept
	c.removals.removedAll()
}
