package avro

import (
	"sync"
	"time"
)

// unknownCache remembers, for a TTL, schema ids the registry said it does
// not know, so that a stream of records with such ids does not send one
// request per record. It holds at most max ids: when full, the oldest
// entry is forgotten first, so a producer writing random ids costs O(1)
// memory and O(1) work per id, never a copy of the whole cache. Safe for
// concurrent use.
type unknownCache struct {
	ttl time.Duration
	max int

	mu    sync.Mutex
	until map[int]time.Time
	order []int // ring of ids in insertion order; head is the oldest
	head  int
}

func newUnknownCache(ttl time.Duration, max int) *unknownCache {
	return &unknownCache{ttl: ttl, max: max, until: map[int]time.Time{}}
}

// has reports whether id is remembered as unknown at now.
func (c *unknownCache) has(id int, now time.Time) bool {
	if c.ttl <= 0 || c.max <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.until[id]
	if ok && !now.Before(u) {
		delete(c.until, id) // its ring slot is reused when its turn comes
		return false
	}
	return ok
}

// add remembers id as unknown until now+ttl, forgetting the oldest entry
// when the cache is full.
func (c *unknownCache) add(id int, now time.Time) {
	if c.ttl <= 0 || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.until[id]; ok {
		c.until[id] = now.Add(c.ttl)
		return
	}
	if len(c.order) < c.max {
		c.order = append(c.order, id)
	} else {
		// Evict the oldest slot. Every map entry has a slot, so the map
		// never holds more than max ids. An id can sit in the ring twice
		// (expired, then added again): evicting its older slot forgets it
		// early, which costs one more lookup, never memory.
		delete(c.until, c.order[c.head])
		c.order[c.head] = id
		c.head = (c.head + 1) % c.max
	}
	c.until[id] = now.Add(c.ttl)
}

// forget drops id (the registry knows it now).
func (c *unknownCache) forget(id int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.until, id)
}
