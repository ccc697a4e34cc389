package engine

import (
	"math"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// docCache is a task's write-behind cache of documents, in least recently
// used order. It never evicts by itself: a dirty document must stay until
// it is flushed, so the task trims the cache back to its bound only after
// a flush, dropping the coldest documents and keeping the hot set (an
// earlier version emptied the whole cache whenever it outgrew the bound,
// and under a skewed workload every flush was followed by reloading the
// most popular documents from the store). A docCache belongs to one task
// and is not safe for concurrent use.
type docCache struct {
	lru *simplelru.LRU[int64, *MovieStats]
}

func newDocCache() docCache {
	// No size limit here (see trim); NewLRU fails only for a size <= 0.
	lru, _ := simplelru.NewLRU[int64, *MovieStats](math.MaxInt, nil)
	return docCache{lru: lru}
}

// get returns the cached document of id and marks it recently used; nil
// when it is not cached.
func (c docCache) get(id int64) *MovieStats {
	d, _ := c.lru.Get(id)
	return d
}

// has reports whether id is cached, without touching its recency.
func (c docCache) has(id int64) bool { return c.lru.Contains(id) }

// put caches d as id's document, most recently used.
func (c docCache) put(id int64, d *MovieStats) { c.lru.Add(id, d) }

// len is the number of cached documents.
func (c docCache) len() int { return c.lru.Len() }

// trim drops the least recently used documents until at most max remain.
// Call it only when no cached document is dirty.
func (c docCache) trim(max int) {
	for c.lru.Len() > max {
		c.lru.RemoveOldest()
	}
}

// trimClean drops the least recently used documents that are not in
// dirty until at most max remain (or only dirty ones do).
func (c docCache) trimClean(max int, dirty map[int64]struct{}) {
	if c.lru.Len() <= max {
		return
	}
	if len(dirty) == 0 {
		c.trim(max)
		return
	}
	for _, id := range c.lru.Keys() { // oldest first
		if c.lru.Len() <= max {
			return
		}
		if _, ok := dirty[id]; !ok {
			c.lru.Remove(id)
		}
	}
}

// reset empties the cache.
func (c docCache) reset() { c.lru.Purge() }
