package engine

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// docCache is a task's write-behind cache of documents, in least recently
// used order. It never evicts by itself: a dirty document must stay until
// flushed, so the task trims it back to its bound after a flush.
//
// A job whose keys are all 8 bytes is cached by the key as a uint64, which
// hashes and compares in a few instructions; others by the key as a string
// (one of the two LRUs is set). Callers pass only keys the job's CheckKey
// accepted. Not safe for concurrent use.
type docCache struct {
	n *simplelru.LRU[uint64, *entry]
	s *simplelru.LRU[string, *entry]
}

// entry is one cached document: the aggregate and its processing
// metadata.
type entry struct {
	key   []byte
	short [16]byte // holds key when it fits (no allocation of its own)
	// dirty is set while the entry changed since the last flush took it
	// (the task lists it in task.dirty once).
	dirty   bool
	version int64
	sources map[int32]int64
	agg     Agg
}

// newEntry returns an empty document of key (copied) with the aggregate a.
func newEntry(key []byte, version int64, a Agg) *entry {
	d := &entry{version: version, agg: a}
	if len(key) <= len(d.short) {
		d.key = d.short[:copy(d.short[:], key):len(key)]
	} else {
		d.key = bytes.Clone(key)
	}
	return d
}

// newDocCache returns an empty cache; fixed8 when every key is 8 bytes.
func newDocCache(fixed8 bool) docCache {
	// No size limit here (see trim); NewLRU fails only for a size <= 0.
	if fixed8 {
		n, _ := simplelru.NewLRU[uint64, *entry](math.MaxInt, nil)
		return docCache{n: n}
	}
	s, _ := simplelru.NewLRU[string, *entry](math.MaxInt, nil)
	return docCache{s: s}
}

func key8(key []byte) uint64 { return binary.BigEndian.Uint64(key) }

// get returns the cached document of key and marks it recently used; nil
// when it is not cached.
func (c docCache) get(key []byte) *entry {
	var d *entry
	if c.n != nil {
		d, _ = c.n.Get(key8(key))
	} else {
		d, _ = c.s.Get(string(key))
	}
	return d
}

// put caches d (under d.key), most recently used.
func (c docCache) put(d *entry) {
	if c.n != nil {
		c.n.Add(key8(d.key), d)
		return
	}
	c.s.Add(string(d.key), d)
}

// trimClean drops the least recently used documents that are not dirty
// until at most max remain (or only dirty ones do).
func (c docCache) trimClean(max int) {
	if c.n != nil {
		trimCleanLRU(c.n, max)
	} else {
		trimCleanLRU(c.s, max)
	}
}

func trimCleanLRU[K comparable](l *simplelru.LRU[K, *entry], max int) {
	if l.Len() <= max {
		return
	}
	for _, k := range l.Keys() { // oldest first
		if l.Len() <= max {
			return
		}
		if d, ok := l.Peek(k); ok && !d.dirty {
			l.Remove(k)
		}
	}
}

// reset empties the cache.
func (c docCache) reset() {
	if c.n != nil {
		c.n.Purge()
	} else {
		c.s.Purge()
	}
}

// MinPartitionCacheDocs is the least bound Config.CacheBudgetDocs gives a
// partition: below a few hundred documents, a flush's fixed costs (a
// transaction, a synced store write) would be paid every few records.
const MinPartitionCacheDocs = 250

// partitionCacheBound returns the bound of one partition's cache (and the
// changed documents that flush it early) when the instance owns owned
// partitions: maxDocs, lowered to an equal share of budget (0: none) but
// not below MinPartitionCacheDocs.
func partitionCacheBound(maxDocs, budget int, owned int64) int {
	if budget <= 0 {
		return maxDocs
	}
	share := budget / int(max(owned, 1))
	return min(maxDocs, max(share, MinPartitionCacheDocs))
}

// cacheBound is partitionCacheBound for the partitions assigned now and
// the current budget, read at every flush check. Safe for concurrent use.
func (e *Engine) cacheBound() int {
	return partitionCacheBound(e.cfg.CacheMaxDocs, int(e.budget.Load()), e.c.assigned.Load())
}

// SetCacheBudget replaces Config.CacheBudgetDocs while the engine runs
// (0, or a negative n, turns the budget off). The partitions take their
// new share at their next flush. Safe for concurrent use (a memory
// governor calls it).
func (e *Engine) SetCacheBudget(n int) { e.budget.Store(int64(max(n, 0))) }

// CacheBudget returns the budget in effect (see SetCacheBudget).
func (e *Engine) CacheBudget() int { return int(e.budget.Load()) }
