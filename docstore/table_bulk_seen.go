package docstore

import (
	"cmp"

	"github.com/bits-and-blooms/bloom/v3"
)

// seenKeys remembers, approximately, the keys a bulk load has written out.
// Once the pinned write cache is full it no longer holds every such key
// (tableBulk.overflow), and a buffered key it does not hold may be new or
// may have been written by an earlier buffer: seenKeys tells them apart
// without reading the store. A key it does not contain was never written
// by the load, so the load writes it blind; only a key it may contain is
// read (about one new key in a hundred, and every key written before).
// A restore from a compacted changelog (one record per key) therefore
// reads next to nothing, however large it is.
//
// It is a chain of Bloom filters, each with twice the capacity of the one
// before, so it needs no size up front: about 1.2 bytes per key at a 1 %
// false-positive rate. Not safe for concurrent use (guarded by Store.wmu).
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
