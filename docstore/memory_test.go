package docstore

import (
	"context"
	"testing"
)

// TestMemoryReportsPebble checks Store.Memory: the configured block cache
// and memtable sizes, at least the one memtable being written (Pebble's
// first ones are smaller than the configured size), a block
// cache that holds what a read of stored documents brought in, and zero once
// the store is closed.
func TestMemoryReportsPebble(t *testing.T) {
	const cacheSize, memtable = 8 << 20, 4 << 20
	dir := filledDir(t, 2000, 500)
	s, err := Open(dir, WithCacheSize(cacheSize), WithMemtableSize(memtable))
	if err != nil {
		t.Fatal(err)
	}
	tb := mustTable(t, s, ordersSpec)
	<-tb.cache.warmed
	keys := make([][]byte, 2000)
	for i := range keys {
		keys[i] = orderDoc(i, 0, 1).Key
	}
	s.wmu.Lock()
	s.tcache.clear(tb.cache) // Load reads the store
	s.wmu.Unlock()
	if _, err := tb.Load(context.Background(), keys); err != nil {
		t.Fatal(err)
	}
	m := s.Memory()
	if m.BlockCacheMax != cacheSize || m.Memtable != memtable {
		t.Errorf("Memory() sizes: block cache %d, memtable %d; want %d, %d", m.BlockCacheMax, m.Memtable, cacheSize, memtable)
	}
	if m.MemtableCount < 1 || m.Memtables <= 0 || m.Memtables > int64(m.MemtableCount)*memtable {
		t.Errorf("Memory() memtables: %d holding %d bytes; want at least 1, each of at most %d bytes", m.MemtableCount, m.Memtables, memtable)
	}
	if m.BlockCache <= 0 || m.BlockCache > m.BlockCacheMax {
		t.Errorf("Memory().BlockCache = %d after reading 2000 stored documents; want in (0, %d]", m.BlockCache, m.BlockCacheMax)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.Memory(); got != (Memory{}) {
		t.Errorf("Memory() of a closed store = %+v; want zero", got)
	}
}
