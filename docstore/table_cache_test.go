package docstore

import (
	"context"
	"math/rand/v2"
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
// a key the cache holds is not overwritten by what a Load read (a write
// since the snapshot put it there); a key whose entry left the cache since
// the snapshot (evicted, or written without room) is not learned, the
// others are; and nothing is learned once the log of removals no longer
// reaches back to the snapshot, or after a drop or an emptying. The bound
// holds throughout.
func TestTableCachesLearn(t *testing.T) {
	old := tablePrior{priorHead: priorHead{exists: true, version: 1}}
	newer := tablePrior{priorHead: priorHead{exists: true, version: 2}}
	for _, tc := range []struct {
		name    string
		between func(c *tableCaches, m *tableCache) // after the Load's snapshot
		want    map[string]int64                    // key -> cached version (0: absent)
	}{
		{"nothing between: learned", func(*tableCaches, *tableCache) {}, map[string]int64{"a": 1, "b": 1}},
		{"a write between: its entry wins", func(c *tableCaches, m *tableCache) { c.put(m, "a", newer, 10) }, map[string]int64{"a": 2, "b": 1}},
		{"written and evicted between: that key not learned", func(c *tableCaches, m *tableCache) {
			c.put(m, "a", newer, 10)
			c.evict(m, 1)
		}, map[string]int64{"a": 0, "b": 1}},
		{"an eviction of another key between: learned", func(c *tableCaches, m *tableCache) {
			c.put(m, "x", newer, 10)
			c.evict(m, 1)
		}, map[string]int64{"a": 1, "b": 1}},
		{"a write without room between: that key not learned", func(c *tableCaches, m *tableCache) {
			c.n = 10 // other tables fill the caches
			c.put(m, "a", newer, 10)
			c.n = 0
		}, map[string]int64{"a": 0, "b": 1}},
		{"removal log outrun: nothing learned", func(c *tableCaches, m *tableCache) {
			for i := range maxRemovalLog + 1 {
				c.put(m, string(rune('p'+i)), newer, 10)
				c.evict(m, 1)
			}
		}, map[string]int64{"a": 0, "b": 0}},
		{"a drop between: nothing learned", func(c *tableCaches, m *tableCache) { c.forget(m, [][]byte{[]byte("x")}) }, map[string]int64{"a": 0, "b": 0}},
		{"emptied between: nothing learned", func(c *tableCaches, _ *tableCache) { c.clearAll() }, map[string]int64{"a": 0, "b": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c tableCaches
			m := c.of("orders")
			before := m.removals.count()
			tc.between(&c, m)
			c.learn(m, before, []cached{{"a", old}, {"b", old}}, 10)
			for k, v := range tc.want {
				p, ok := m.m.get(k)
				if got := map[bool]int64{true: p.version}[ok]; got != v {
					t.Errorf("key %s: cached version %d; want %d", k, got, v)
				}
			}
			if c.n != m.m.len() {
				t.Errorf("count %d; want %d, the entries held", c.n, m.m.len())
			}
		})
	}
	t.Run("bound", func(t *testing.T) {
		var c tableCaches
		m := c.of("orders")
		for i := range 20 {
			c.put(m, string(rune('a'+i)), old, 8)
		}
		if m.m.len() > 8 || c.n != m.m.len() {
			t.Errorf("20 puts under a bound of 8: %d held, count %d", m.m.len(), c.n)
		}
		if ok := m.m.has(string(rune('a' + 19))); !ok {
			t.Errorf("the last key put is not cached: a full cache must evict to make room")
		}
	})
}

// TestTableWriteCacheUnderConcurrentLoads writes random keys of a table
// through a small write cache (evicting all the time) while two
// goroutines Load random keys of it, so that Loads teach the cache what
// they read while entries leave it. A read kept for a key written and
// evicted since the Load's snapshot would name the wrong index entries to
// delete at the key's next write: the table would end up with dangling
// entries, which wantTableDocs reports.
func TestTableWriteCacheUnderConcurrentLoads(t *testing.T) {
	s := openTemp(t, WithFsync(false), WithWriteCache(32))
	defer s.Close()
	tb := mustTable(t, s, ordersSpec)
	ctx := context.Background()
	epoch, err := tb.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	stop := loadConcurrently(11, func(r *rand.Rand) error {
		keys := make([][]byte, 24)
		for i := range keys {
			keys[i] = orderDoc(r.IntN(200), 0, 1).Key
		}
		_, err := tb.Load(ctx, keys)
		return err
	})
	r := rand.New(rand.NewPCG(5, 6))
	version := map[int]int64{}
	for i := range 300 {
		var docs []engine.Doc
		for _, k := range r.Perm(200)[:16] {
			version[k]++
			docs = append(docs, orderDoc(k, 0, version[k]))
		}
		if err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: int64(i + 1)}); err != nil {
			stop()
			t.Fatal(err)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("load: %v", err)
	}
	var want []engine.Doc
	for k, v := range version {
		want = append(want, orderDoc(k, 0, v))
	}
	wantTableDocs(t, s, tb, want)
}
