package docstore

import (
	"context"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestTableWarmUp reopens a store holding two tables of 300 documents
// and opens them: warm-up fills the write cache with whole entries, up to
// its bound (WithWriteCache) over both tables and never past it; a Load
// of warmed keys reads no document, and an Apply of them reads none
// either.
func TestTableWarmUp(t *testing.T) {
	const n = 300
	dir := t.TempDir()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	other := engine.TableSpec{Name: "other", Indexes: ordersSpec.Indexes}
	fillTable(t, mustTable(t, s, ordersSpec), n, 100)
	fillTable(t, mustTable(t, s, other), n, 100)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		cache       int
		first, both int // entries after the first table's warm-up, after both
	}{
		{"no cache", 0, 0, 0},
		{"room for a third of one", 100, 100, 100},
		{"room for one and a half", 450, n, 450},
		{"room for both", 1000, n, 2 * n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := Open(dir, WithFsync(false), WithWriteCache(tc.cache))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tb := mustTable(t, s, ordersSpec)
			<-tb.cache.warmed
			if got := s.tcache.n; got != tc.first {
				t.Errorf("after warming %s: %d entries; want %d", ordersSpec.Name, got, tc.first)
			}
			<-mustTable(t, s, other).cache.warmed
			if got := s.tcache.n; got != tc.both {
				t.Errorf("after warming both: %d entries; want %d", got, tc.both)
			}
			var keys [][]byte
			var docs []engine.Doc
			for k, p := range tb.cache.m.all() {
				if !p.whole {
					t.Fatalf("warmed entry of %q is not whole", k)
				}
				keys = append(keys, []byte(k))
			}
			s.counts.reset()
			got, err := tb.Load(ctx, keys)
			if err != nil {
				t.Fatal(err)
			}
			if reads := s.counts.docsRead(); reads != 0 || len(got) != len(keys) {
				t.Errorf("Load of %d warmed keys: %d documents, %d read; want all, none read", len(keys), len(got), reads)
			}
			for _, d := range got {
				d.Version++
				docs = append(docs, d)
			}
			applyDocs(t, tb, 0, n+1, docs...)
			if reads := s.counts.writeReads.Load(); reads != 0 {
				t.Errorf("Apply of %d warmed keys read %d documents; want 0", len(docs), reads)
			}
		})
	}
}
