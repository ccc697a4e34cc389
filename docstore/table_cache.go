package docstore

// tableCaches is the write cache of tables, the table form of priorCache:
// for keys a table's writes have read or written, what the next write of
// the key needs (tablePrior: version, partition, index values), so that
// Apply writes those keys without reading their documents (an LSM read
// is a search through levels; the write is an append). One cache per
// table name, shared by every handle of the table. It mirrors the
// committed state: entries change only after a batch commits, and a drop
// or reset removes its table's. All tables together hold at most max
// entries (WithWriteCache, the movies' bound, counted apart from them);
// once full, new keys are read as before. Guarded by Store.wmu.
type tableCaches struct {
	byName map[string]map[string]tablePrior
	n      int
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

// put records p (of an existing document) for key in m unless the caches
// are full and m does not hold key yet.
func (c *tableCaches) put(m map[string]tablePrior, key string, p tablePrior, max int) {
	if _, ok := m[key]; ok {
		m[key] = p
		return
	}
	if c.n < max {
		m[key] = p
		c.n++
	}
}

// forget removes key from m.
func (c *tableCaches) forget(m map[string]tablePrior, key string) {
	if _, ok := m[key]; ok {
		delete(m, key)
		c.n--
	}
}

// clear empties m.
func (c *tableCaches) clear(m map[string]tablePrior) {
	c.n -= len(m)
	clear(m)
}

// cached is a key's state after a batch, for the write cache.
type cached struct {
	key string
	p   tablePrior
}
