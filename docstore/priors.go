package docstore

import (
	"sync"
	"sync/atomic"

	"github.com/keepstate/keepstate/engine"
)

// prior is what the store holds of a movie, as its next write and its
// next Load need it: its version (for the version rule), its partition
// (members key), its count and sum (its average names its rank index
// entry, removed when it changes; Load returns them) and, when the
// document's one source is its own partition (the movie job's documents:
// the aggregate task of partition p reads partition p of the repartition
// topic), that source's offset. A prior without it (hasSrc false) still
// serves writes; Load reads such a movie from the store. 40 bytes: the
// cache holds 250,000 of them by default.
type prior struct {
	version int64
	sum     float64
	count   int64
	srcOff  int64
	part    int32
	hasSrc  bool
	absent  bool // the store holds no such movie (learned by Load)
}

// priorOf returns the prior of the stored document m.
func priorOf(m engine.MovieStats) prior {
	p := prior{version: m.Version, sum: m.Sum, count: m.Count, part: m.Partition}
	if off, ok := m.Sources[m.Partition]; ok && len(m.Sources) == 1 {
		p.srcOff, p.hasSrc = off, true
	}
	return p
}

// avg returns the movie's average, computed as engine.MovieStats.Avg does
// (the same bits: the rank entry it names is the one written).
func (p prior) avg() float64 {
	return engine.MovieStats{Count: p.count, Sum: p.sum}.Avg()
}

// stats returns the document of movie id that p describes; ok is false
// when p cannot rebuild it (an absent movie, or not one source: its own
// partition).
func (p prior) stats(id int64) (engine.MovieStats, bool) {
	if p.absent || !p.hasSrc {
		return engine.MovieStats{}, false
	}
	return engine.MovieStats{MovieID: id, Partition: p.part, Count: p.count, Sum: p.sum, Version: p.version,
		Sources: map[int32]int64{p.part: p.srcOff}}, true
}

// priorCache remembers, for movies the store has read or written, what the
// next write of the movie needs (a prior, or that the movie is absent),
// so that Apply writes without reading: an LSM
// write is an append, a read is a search through levels. It mirrors the
// committed state: entries change only after a batch commits, Load adds
// only what it read while no write committed (Store.learn), DropPartition
// and Reset remove theirs, and a failed commit empties it.
//
// It holds at most max entries (WithWriteCache, about 110 bytes each with
// the map).
// Once full, a new entry evicts an eighth of the cache, in the map's
// (random) order: the cache serves the movies the engine is working on,
// which it has just loaded or written, not the whole store. A bulk load
// pins it (pin): nothing is evicted, because the load takes a movie the
// cache does not know for a new one, and the cache may grow to bulkMax;
// when it is full the load ends, and unpin shrinks it back to max. A crash
// loses it; the reopened store fills it again as it reads (and warm fills
// it from the documents).
//
// Load answers from it too (serve): an entry is the movie's committed
// state, so it is what a read of the store would return, without the
// search through the LSM's levels. A Load must see whole batches, though,
// and a batch becomes visible in the store before the cache learns it:
// so every change of the store's documents (a commit, an ingestion) runs
// between begin and end, which make seq odd while it lasts, and a Load
// uses the cache only when seq was even before its snapshot and is still
// the same when it reads the cache (a sequence lock).
//
// Changes hold Store.wmu and mu; reads hold either (writers read under
// wmu, Load under mu's read lock, so that it never waits for a write's
// commit).
type priorCache struct {
	mu     sync.RWMutex
	seq    atomic.Uint64 // odd while the store's documents change (begin, end)
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
	c.mu.Lock()
	defer c.mu.Unlock()
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

// evict removes n entries. The caller holds mu.
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
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		delete(c.m, id)
	}
	c.removals.removed(ids)
}

// clear empties the cache, releasing its memory.
func (c *priorCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
}

func (c *priorCache) clearLocked() {
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
	c.mu.Lock()
	defer c.mu.Unlock()
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
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
	c.pinned = true
}

// unpin ends a bulk load's pin; a cache grown past max is shrunk to it in
// a new map (a Go map keeps its memory after deletes).
func (c *priorCache) unpin() {
	c.mu.Lock()
	defer c.mu.Unlock()
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

// begin marks the start of a change of the store's documents that the
// cache learns only once it is visible (a commit, then its after; an
// ingestion, then awaitIngest): Loads stop answering from the cache until
// end. Every begin has one end. The caller holds wmu.
func (c *priorCache) begin() { c.seq.Add(1) }

// end marks the end of the change begin started, once the cache holds
// its result (or was emptied).
func (c *priorCache) end() { c.seq.Add(1) }

// seqNow returns the sequence number a Load reads before its snapshot
// (odd while a change is under way: the snapshot may hold what the cache
// does not yet).
func (c *priorCache) seqNow() uint64 { return c.seq.Load() }

// serve puts into out the documents of ids that the cache can rebuild
// (prior.stats) and returns the other ids (in their order), which the
// caller reads from the store: movies the cache does not know, or knows
// without their one source. A movie it knows to be absent is neither.
// seq is what seqNow returned before the caller's snapshot: if a change
// was under way then, or has begun since, the cache may be behind or
// ahead of the snapshot, and serve answers nothing (returns ids). It
// holds mu's read lock, never wmu.
func (c *priorCache) serve(seq uint64, ids []int64, out map[int64]engine.MovieStats) (rest []int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.m) == 0 || seq%2 != 0 || c.seq.Load() != seq {
		return ids
	}
	for _, id := range ids {
		p, cached := c.m[id]
		if cached && p.absent {
			continue
		}
		if m, ok := p.stats(id); cached && ok {
			out[id] = m
			continue
		}
		rest = append(rest, id)
	}
	return rest
}
