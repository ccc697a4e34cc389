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
	lru *simplelru.LRU[string, *entry]
}

// entry is one cached document: the aggregate and its processing
// metadata.
type entry struct {
	// id is string(key), the cache's and the dirty set's key.
	id      string
	key     []byte
	version int64
	sources map[int32]int64
	agg     Agg
}

func newDocCache() docCache {
	// No size limit here (see trim); NewLRU fails only for a size <= 0.
	lru, _ := simplelru.NewLRU[string, *entry](math.MaxInt, nil)
	return docCache{lru: lru}
}

// get returns the cached document of key and marks it recently used; nil
// when it is not cached.
func (c docCache) get(key string) *entry {
	d, _ := c.lru.Get(key)
	return d
}

// has reports whether key is cached, without touching its recency.
func (c docCache) has(key string) bool { return c.lru.Contains(key) }

// put caches d as key's document, most recently used.
func (c docCache) put(key string, d *entry) { c.lru.Add(key, d) }

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
func (c docCache) trimClean(max int, dirty map[string]struct{}) {
	if c.lru.Len() <= max {
		return
	}
	if len(dirty) == 0 {
		c.trim(max)
		return
	}
	for _, k := range c.lru.Keys() { // oldest first
		if c.lru.Len() <= max {
			return
		}
		if _, ok := dirty[k]; !ok {
			c.lru.Remove(k)
		}
	}
}

// reset empties the cache.
func (c docCache) reset() { c.lru.Purge() }
