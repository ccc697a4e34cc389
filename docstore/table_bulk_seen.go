package docstore

import (
	"cmp"

	"github.com/bits-and-blooms/bloom/v3"
)

// seenKeys remembers, approximately, the keys a bulk load has written out,
// for when the full write cache no longer holds them all
// (tableBulk.overflow): only a key it may contain is read (about one new
// key in a hundred, and every key written before), so a restore from a
// compacted changelog reads next to nothing however large it is. It is a
// chain of Bloom filters, each twice the capacity of the one before (no
// size up front; about 1.2 bytes a key at a 1 % false-positive rate).
// Guarded by Store.wmu.
type seenKeys struct {
	filters []*bloom.BloomFilter
	n       uint // keys added to the last filter
	max     uint // the last filter's capacity
	first   uint // the first filter's capacity (0: seenFirst)
}

const (
	// seenFirst is the capacity of the first filter (about 1.2 MB).
	seenFirst = 1 << 20
	// seenFalsePositive is each filter's false-positive rate at capacity.
	seenFalsePositive = 0.01
)

// add records key.
func (s *seenKeys) add(key []byte) {
	if len(s.filters) == 0 || s.n >= s.max {
		s.max = max(2*s.max, cmp.Or(s.first, seenFirst))
		s.filters = append(s.filters, bloom.NewWithEstimates(s.max, seenFalsePositive))
		s.n = 0
	}
	s.filters[len(s.filters)-1].Add(key)
	s.n++
}

// mayContain reports whether key may have been added: false means never.
func (s *seenKeys) mayContain(key []byte) bool {
	for _, f := range s.filters {
		if f.Test(key) {
			return true
		}
	}
	return false
}
