package engine

import (
	"testing"
)

// ck is the record key of movie id.
func ck(id int64) []byte { return int64Key(id) }

// cacheShapes are the two ways a docCache keys documents.
var cacheShapes = []struct {
	name   string
	fixed8 bool
}{{"uint64 keys", true}, {"string keys", false}}

func TestDocCacheTrimKeepsRecentlyUsed(t *testing.T) {
	tests := []struct {
		name    string
		touch   []int64 // read after 1..5 were put in order
		max     int
		want    []int64
		dropped []int64
	}{
		{name: "untouched keeps the newest", max: 2, want: []int64{4, 5}, dropped: []int64{1, 2, 3}},
		{name: "a read makes a document hot", touch: []int64{1}, max: 2, want: []int64{1, 5}, dropped: []int64{2, 3, 4}},
		{name: "under the bound nothing goes", touch: []int64{3}, max: 10, want: []int64{1, 2, 3, 4, 5}},
		{name: "bound zero empties", max: 0, dropped: []int64{1, 2, 3, 4, 5}},
	}
	for _, shape := range cacheShapes {
		for _, tt := range tests {
			t.Run(shape.name+"/"+tt.name, func(t *testing.T) {
				c := newDocCache(shape.fixed8)
				for id := int64(1); id <= 5; id++ {
					c.put(&entry{key: ck(id)})
				}
				for _, id := range tt.touch {
					if d := c.get(ck(id)); d == nil || string(d.key) != string(ck(id)) {
						t.Fatalf("get(%d) = %v, want the document", id, d)
					}
				}
				c.trim(tt.max)
				if got := c.len(); got != len(tt.want) {
					t.Errorf("len after trim(%d) = %d, want %d", tt.max, got, len(tt.want))
				}
				for _, id := range tt.want {
					if !c.has(ck(id)) {
						t.Errorf("%d dropped, want it kept", id)
					}
				}
				for _, id := range tt.dropped {
					if c.has(ck(id)) {
						t.Errorf("%d kept, want it dropped", id)
					}
				}
			})
		}
	}
}

func TestDocCacheReset(t *testing.T) {
	for _, shape := range cacheShapes {
		t.Run(shape.name, func(t *testing.T) {
			c := newDocCache(shape.fixed8)
			c.put(&entry{key: ck(1)})
			c.reset()
			if got := c.get(ck(1)); got != nil {
				t.Errorf("get after reset = %v, want nil", got)
			}
			if got := c.len(); got != 0 {
				t.Errorf("len after reset = %d, want 0", got)
			}
		})
	}
}

func TestDocCacheTrimCleanKeepsDirty(t *testing.T) {
	for _, shape := range cacheShapes {
		t.Run(shape.name, func(t *testing.T) {
			c := newDocCache(shape.fixed8)
			for id := int64(1); id <= 5; id++ {
				c.put(&entry{key: ck(id), dirty: id <= 2}) // the two oldest are dirty
			}
			c.trimClean(3)
			for _, id := range []int64{1, 2, 5} {
				if !c.has(ck(id)) {
					t.Errorf("%d dropped, want it kept (dirty or newest)", id)
				}
			}
			for _, id := range []int64{3, 4} {
				if c.has(ck(id)) {
					t.Errorf("%d kept, want it dropped (oldest clean)", id)
				}
			}
			c.trimClean(0)
			if got := c.len(); got != 2 {
				t.Errorf("len after trimClean(0) = %d, want 2 (only the dirty ones)", got)
			}
		})
	}
}

// TestDocCacheStringKeys: keys of any length, including ones sharing a
// prefix, are distinct documents in a string-keyed cache.
func TestDocCacheStringKeys(t *testing.T) {
	c := newDocCache(false)
	keys := []string{"a", "ab", "abc", "a\x00", string(make([]byte, 1024))}
	for _, k := range keys {
		c.put(&entry{key: []byte(k)})
	}
	for _, k := range keys {
		if d := c.get([]byte(k)); d == nil || string(d.key) != k {
			t.Errorf("get(%q) = %v, want its own document", k, d)
		}
	}
	if got, want := c.len(), len(keys); got != want {
		t.Errorf("len = %d, want %d", got, want)
	}
	if c.has([]byte("abcd")) {
		t.Errorf("has(%q) = true, want false", "abcd")
	}
}

// TestPartitionCacheBound checks how a budget shares out: an equal share
// per owned partition, capped by the per-partition bound, floored at
// MinPartitionCacheDocs (unless the bound is lower), none without a budget.
func TestPartitionCacheBound(t *testing.T) {
	for _, tc := range []struct {
		name            string
		maxDocs, budget int
		owned           int64
		want            int
	}{
		{"no budget", 10000, 0, 12, 10000},
		{"three partitions: the bound", 10000, 30000, 3, 10000},
		{"one partition: capped at the bound", 10000, 30000, 1, 10000},
		{"six partitions: a sixth", 10000, 30000, 6, 5000},
		{"none assigned yet: the whole budget, capped", 10000, 3000, 0, 3000},
		{"many partitions: floored", 10000, 30000, 1000, MinPartitionCacheDocs},
		{"bound below the floor wins", 10, 30000, 1000, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := partitionCacheBound(tc.maxDocs, tc.budget, tc.owned); got != tc.want {
				t.Errorf("partitionCacheBound(%d, %d, %d) = %d; want %d", tc.maxDocs, tc.budget, tc.owned, got, tc.want)
			}
		})
	}
}

// trim drops the least recently used documents until at most max remain.
// Call it only when no cached document is dirty.
func (c docCache) trim(max int) {
	for c.len() > max {
		if c.n != nil {
			c.n.RemoveOldest()
		} else {
			c.s.RemoveOldest()
		}
	}
}

// has reports whether key is cached, without touching its recency.
func (c docCache) has(key []byte) bool {
	if c.n != nil {
		return c.n.Contains(key8(key))
	}
	return c.s.Contains(string(key))
}

// len is the number of cached documents.
func (c docCache) len() int {
	if c.n != nil {
		return c.n.Len()
	}
	return c.s.Len()
}
