package docstore

import (
	"context"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestTableLoadFeedsTheWriteCache loads keys of a table (some stored, some
// not) and then writes them: the write reads no document, and the table
// ends up as if it had read them (versions, index entries, size). Without
// the cache learning from Load, every key would be read again.
func TestTableLoadFeedsTheWriteCache(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, WithWriteCache(1000))
	defer s.Close()
	tb := mustTable(t, s, ordersSpec)
	fillTable(t, tb, 100, 50)
	s.tcache.clearAll() // as after a restart: the cache knows nothing
	var keys [][]byte
	var docs []engine.Doc
	for i := 90; i < 110; i++ { // 90..99 stored, 100..109 new
		keys = append(keys, orderDoc(i, 0, 1).Key)
		docs = append(docs, orderDoc(i, 0, 2))
	}
	got, err := tb.Load(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 {
		t.Fatalf("Load: got %d documents, want the 10 stored", len(got))
	}
	reads := s.counts.writeReads.Load()
	applyDocs(t, tb, 0, 200, docs...)
	if n := s.counts.writeReads.Load() - reads; n != 0 {
		t.Errorf("Apply after Load read %d documents; want 0", n)
	}
	for _, d := range docs {
		stored, err := tb.Get(ctx, d.Key)
		if err != nil || stored.Version != 2 {
			t.Errorf("Get(%s) = version %d, %v; want version 2", d.Key, stored.Version, err)
		}
	}
	st, err := rawTableState(s, tb)
	if err != nil {
		t.Fatal(err)
	}
	if st.docs != 110 || st.members != 110 || st.size != 110 || st.entries[0] != 110 || st.entries[1] != 110 {
		t.Errorf("after the write: %+v; want 110 documents, members, size and entries per index", st)
	}
}

// TestTableCachesLearn checks the rule that keeps a Load's read current:
// nothing is learned once an entry left the caches after the Load's
// snapshot (an eviction, a drop, a key written without room), a key the
// cache holds is not overwritten by what a Load read, and the bound holds.
func TestTableCachesLearn(t *testing.T) {
	old := tablePrior{exists: true, version: 1}
	newer := tablePrior{exists: true, version: 2}
	for _, tc := range []struct {
		name    string
		between func(c *tableCaches, m map[string]tablePrior) // after the Load's snapshot
		want    map[string]int64                              // key -> cached version (0: absent)
	}{
		{"nothing between: learned", func(*tableCaches, map[string]tablePrior) {}, map[string]int64{"a": 1, "b": 1}},
		{"a write between: its entry wins", func(c *tableCaches, m map[string]tablePrior) { c.put(m, "a", newer, 10) }, map[string]int64{"a": 2, "b": 1}},
		{"an eviction between: nothing learned", func(c *tableCaches, m map[string]tablePrior) { c.evict(m, 1) }, map[string]int64{"a": 0, "b": 0}},
		{"a drop between: nothing learned", func(c *tableCaches, m map[string]tablePrior) { c.forget(m, "x") }, map[string]int64{"a": 0, "b": 0}},
		{"a write without room between: nothing learned", func(c *tableCaches, m map[string]tablePrior) {
			c.n = 10 // other tables fill the caches
			c.put(m, "a", newer, 10)
			c.n = 0
		}, map[string]int64{"a": 0, "b": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c tableCaches
			m := c.of("orders")
			before := c.removals.Load()
			tc.between(&c, m)
			c.learn(m, before, []cached{{"a", old}, {"b", old}}, 10)
			for k, v := range tc.want {
				p, ok := m[k]
				if got := map[bool]int64{true: p.version}[ok]; got != v {
					t.Errorf("key %s: cached version %d; want %d", k, got, v)
				}
			}
			if c.n != len(m) {
				t.Errorf("count %d; want %d, the entries held", c.n, len(m))
			}
		})
	}
	t.Run("bound", func(t *testing.T) {
		var c tableCaches
		m := c.of("orders")
		for i := range 20 {
			c.put(m, string(rune('a'+i)), old, 8)
		}
		if len(m) > 8 || c.n != len(m) {
			t.Errorf("20 puts under a bound of 8: %d held, count %d", len(m), c.n)
		}
		if _, ok := m[string(rune('a'+19))]; !ok {
			t.Errorf("the last key put is not cached: a full cache must evict to make room")
		}
	})
}
