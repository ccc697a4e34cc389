package docstore

import (
	"hash/maphash"
	"iter"
)

// priorSlab is one table's write-cache entries (key → tablePrior) held
// without a pointer per entry: marking a map of hundreds of thousands of
// strings and byte slices slowed large runs. An entry is a slot of one
// slice (its priorHead, where its key and data are in the arena, the next
// slot of the same key hash), found through a map from hash to first slot.
// Arena bytes never change once written, so data get returned stays valid:
// a replaced or removed entry's bytes are left as garbage, and the arena is
// copied anew once they outweigh the live ones. The zero value is empty;
// the caller locks (tableCaches).
type priorSlab struct {
	index map[uint64]int32 // hash of a key → its first slot
	slots []priorSlot
	free  []int32 // slots of removed entries, reused first
	arena [][]byte
	live  int // arena bytes of the entries held, and of those gone
	dead  int
	hand  int // the slot evict looks at first
	seed  maphash.Seed
	mask  uint64 // of a hash: all ones (tests set fewer, for collisions)
}

// priorSlot is one entry of a priorSlab.
type priorSlot struct {
	priorHead
	off   uint32 // its key, then its data, are arena[chunk][off:]
	chunk uint16
	klen  uint16 // 0 for a free slot (keys are not empty)
	dlen  uint16
	next  int32 // the next slot of the same hash, or -1
}

// slabChunk is the most bytes of an arena chunk (the first are smaller,
// for small tables); an entry (at most 1 KiB of key and 4 KiB of data)
// fits in one.
const slabChunk = 1 << 20

func (m *priorSlab) len() int { return len(m.slots) - len(m.free) }

// bytes returns slot i's key and data.
func (m *priorSlab) bytes(i int32) (key, data []byte) {
	s := &m.slots[i]
	b := m.arena[s.chunk][s.off : s.off+uint32(s.klen)+uint32(s.dlen)]
	return b[:s.klen:s.klen], b[s.klen:len(b):len(b)]
}

// find returns key's hash and slot (-1 when the slab does not hold it).
func (m *priorSlab) find(key string) (uint64, int32) {
	if m.index == nil {
		return 0, -1
	}
	h := maphash.String(m.seed, key) & m.mask
	i, ok := m.index[h]
	for ok && i >= 0 {
		if k, _ := m.bytes(i); string(k) == key {
			return h, i
		}
		i = m.slots[i].next
	}
	return h, -1
}

// get returns key's entry.
func (m *priorSlab) get(key string) (tablePrior, bool) {
	_, i := m.find(key)
	if i < 0 {
		return tablePrior{}, false
	}
	_, data := m.bytes(i)
	return tablePrior{priorHead: m.slots[i].priorHead, data: data}, true
}

func (m *priorSlab) has(key string) bool { _, i := m.find(key); return i >= 0 }

// set makes p key's entry and reports whether key is new.
func (m *priorSlab) set(key string, p tablePrior) bool {
	if m.index == nil {
		m.index, m.seed, m.mask = map[uint64]int32{}, maphash.MakeSeed(), ^uint64(0)
	}
	h, i := m.find(key)
	fresh := i < 0
	if fresh {
		if n := len(m.free); n > 0 {
			i, m.free = m.free[n-1], m.free[:n-1]
		} else {
			i = int32(len(m.slots))
			m.slots = append(m.slots, priorSlot{})
		}
		next, ok := m.index[h]
		if !ok {
			next = -1
		}
		m.slots[i].next, m.index[h] = next, i
	} else {
		m.drop(i)
	}
	s := &m.slots[i]
	s.priorHead, s.klen, s.dlen = p.priorHead, uint16(len(key)), uint16(len(p.data))
	s.chunk, s.off = m.alloc(len(key) + len(p.data))
	c := &m.arena[s.chunk]
	*c = append(append(*c, key...), p.data...)
	m.live += len(key) + len(p.data)
	if m.dead > m.live && m.dead > slabChunk/4 {
		m.compact()
	}
	return fresh
}

// drop counts slot i's bytes as garbage.
func (m *priorSlab) drop(i int32) {
	n := int(m.slots[i].klen) + int(m.slots[i].dlen)
	m.live, m.dead = m.live-n, m.dead+n
}

// alloc returns where n bytes appended to the arena go: the last chunk,
// or a new one when they do not fit.
func (m *priorSlab) alloc(n int) (chunk uint16, off uint32) {
	last := len(m.arena) - 1
	if last < 0 || len(m.arena[last])+n > cap(m.arena[last]) {
		size := 4096
		if last >= 0 {
			size = min(2*cap(m.arena[last]), slabChunk)
		}
		m.arena = append(m.arena, make([]byte, 0, max(size, n)))
		last++
	}
	return uint16(last), uint32(len(m.arena[last]))
}

// compact copies the live entries' bytes into a new arena.
func (m *priorSlab) compact() {
	old := m.arena
	m.arena = nil
	for i := range m.slots {
		s := &m.slots[i]
		if s.klen == 0 {
			continue
		}
		b := old[s.chunk][s.off : s.off+uint32(s.klen)+uint32(s.dlen)]
		s.chunk, s.off = m.alloc(len(b))
		m.arena[s.chunk] = append(m.arena[s.chunk], b...)
	}
	m.dead = 0
}

// del removes key's entry and reports whether there was one.
func (m *priorSlab) del(key string) bool {
	h, i := m.find(key)
	if i < 0 {
		return false
	}
	if first := m.index[h]; first == i {
		if next := m.slots[i].next; next >= 0 {
			m.index[h] = next
		} else {
			delete(m.index, h)
		}
	} else {
		prev := first
		for m.slots[prev].next != i {
			prev = m.slots[prev].next
		}
		m.slots[prev].next = m.slots[i].next
	}
	m.drop(i)
	m.slots[i] = priorSlot{}
	m.free = append(m.free, i)
	return true
}

// evict removes up to n entries (at least one when it holds any), going
// round the slots from where the last eviction stopped, and returns their
// keys.
func (m *priorSlab) evict(n int) []string {
	keys := make([]string, 0, min(max(n, 1), m.len()))
	for seen := 0; len(keys) < cap(keys) && seen < len(m.slots); seen++ {
		m.hand %= len(m.slots)
		if m.slots[m.hand].klen != 0 {
			k, _ := m.bytes(int32(m.hand))
			keys = append(keys, string(k))
			m.del(keys[len(keys)-1])
		}
		m.hand++
	}
	return keys
}

// all yields every entry, in slot order.
func (m *priorSlab) all() iter.Seq2[string, tablePrior] {
	return func(yield func(string, tablePrior) bool) {
		for i := range m.slots {
			if m.slots[i].klen == 0 {
				continue
			}
			k, data := m.bytes(int32(i))
			if !yield(string(k), tablePrior{priorHead: m.slots[i].priorHead, data: data}) {
				return
			}
		}
	}
}
