package docstore

// Memory is what the store's engine (Pebble) holds in its block cache and
// memtables at one moment. In a cgo build (internal/malloc.OffHeap) that
// memory is outside Go's heap, so a process memory limit must leave room
// for it beside Go's share.
type Memory struct {
	// BlockCache is the bytes in the block cache now, at most
	// BlockCacheMax (WithCacheSize).
	BlockCache, BlockCacheMax int64
	// Memtables is the bytes the memtables allocated (the one being
	// written, those waiting for a flush and any an iterator still holds),
	// each at most Memtable (Pebble's first ones are smaller: 256 KiB,
	// doubling); Pebble stops writes at MaxMemtables.
	Memtables, Memtable int64
	// MemtableCount is how many memtables exist now.
	MemtableCount int
}

// memoryReporter is a kv that reports its memory (Pebble does).
type memoryReporter interface{ memory() Memory }

// Memory reports what the store's engine holds in memory now (zero for an
// engine that does not say, or a closed store). Safe for concurrent use;
// it takes a snapshot of Pebble's metrics, so call it at most a few times
// a second.
func (s *Store) Memory() Memory {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.kv.(memoryReporter)
	if !ok || s.closed.Load() {
		return Memory{}
	}
	return r.memory()
}

func (p *pebbleKV) memory() Memory {
	m := p.db.Metrics()
	return Memory{
		BlockCache: m.BlockCache.Size, BlockCacheMax: p.opts.Cache.MaxSize(),
		Memtables: int64(m.MemTable.Size + m.MemTable.ZombieSize), Memtable: int64(p.opts.MemTableSize),
		MemtableCount: int(m.MemTable.Count + m.MemTable.ZombieCount),
	}
}
