package docstore

import (
	"encoding/binary"
	"math"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
)

// decodeMovie reads a movie document in the layout docEncoder writes (a
// msgpack map of string keys to integers, floats, strings and one nested
// map of partition strings to offsets) straight into a MovieStats,
// without building Clover's map[string]interface{} first: that decoding
// was a third of the cost of reading a document. ok is false for anything
// it does not know (an unknown field or type, a missing field, a
// truncated document); the caller then decodes with Clover, so a read
// never depends on this fast path. It is pure and allocates only the
// Sources map.
func decodeMovie(b []byte) (m engine.MovieStats, ok bool) {
	r := mpReader{b: b}
	n, ok := r.mapLen()
	if !ok {
		return m, false
	}
	const need = 1<<5 - 1 // movieId, partition, count, sum, version
	seen := 0
	for range n {
		key, ok := r.str()
		if !ok {
			return m, false
		}
		switch string(key) {
		case moviedoc.FieldMovie:
			m.MovieID, ok = r.int()
			seen |= 1
		case moviedoc.FieldPartition:
			var p int64
			p, ok = r.int()
			ok = ok && p >= 0 && p <= math.MaxInt32
			m.Partition = int32(p)
			seen |= 2
		case moviedoc.FieldCount:
			m.Count, ok = r.int()
			seen |= 4
		case moviedoc.FieldVersion:
			m.Version, ok = r.int()
			seen |= 8
		case moviedoc.FieldSum:
			m.Sum, ok = r.float()
			seen |= 16
		case moviedoc.FieldAvg:
			_, ok = r.float()
		case moviedoc.FieldID, fieldRank:
			_, ok = r.str()
		case moviedoc.FieldSources:
			m.Sources, ok = r.sources()
		default:
			return m, false
		}
		if !ok {
			return m, false
		}
	}
	return m, seen == need && r.done()
}

// mpReader reads the few msgpack formats a movie document uses.
type mpReader struct {
	b []byte
	i int
}

func (r *mpReader) done() bool { return r.i == len(r.b) }

// take returns the next n bytes.
func (r *mpReader) take(n int) ([]byte, bool) {
	if n < 0 || len(r.b)-r.i < n {
		return nil, false
	}
	s := r.b[r.i : r.i+n]
	r.i += n
	return s, true
}

func (r *mpReader) byte() (byte, bool) {
	s, ok := r.take(1)
	if !ok {
		return 0, false
	}
	return s[0], true
}

// uint reads an n-byte big-endian unsigned integer.
func (r *mpReader) uint(n int) (uint64, bool) {
	s, ok := r.take(n)
	if !ok {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		v = v<<8 | uint64(c)
	}
	return v, true
}

func (r *mpReader) mapLen() (int, bool) {
	c, ok := r.byte()
	switch {
	case !ok:
		return 0, false
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), true
	case c == 0xde:
		n, ok := r.uint(2)
		return int(n), ok
	case c == 0xdf:
		n, ok := r.uint(4)
		return int(n), ok
	}
	return 0, false
}

func (r *mpReader) str() ([]byte, bool) {
	c, ok := r.byte()
	var n uint64
	switch {
	case !ok:
		return nil, false
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == 0xd9:
		n, ok = r.uint(1)
	case c == 0xda:
		n, ok = r.uint(2)
	case c == 0xdb:
		n, ok = r.uint(4)
	default:
		return nil, false
	}
	if !ok || n > uint64(len(r.b)) {
		return nil, false
	}
	return r.take(int(n))
}

func (r *mpReader) int() (int64, bool) {
	c, ok := r.byte()
	switch {
	case !ok:
		return 0, false
	case c <= 0x7f:
		return int64(c), true
	case c >= 0xe0:
		return int64(int8(c)), true
	}
	var v uint64
	switch c {
	case 0xcc, 0xcd, 0xce: // uint8, 16, 32
		v, ok = r.uint(1 << (c - 0xcc))
		return int64(v), ok
	case 0xcf: // uint64
		v, ok = r.uint(8)
		return int64(v), ok && v <= math.MaxInt64
	case 0xd0:
		v, ok = r.uint(1)
		return int64(int8(v)), ok
	case 0xd1:
		v, ok = r.uint(2)
		return int64(int16(v)), ok
	case 0xd2:
		v, ok = r.uint(4)
		return int64(int32(v)), ok
	case 0xd3:
		v, ok = r.uint(8)
		return int64(v), ok
	}
	return 0, false
}

func (r *mpReader) float() (float64, bool) {
	c, ok := r.byte()
	if !ok {
		return 0, false
	}
	switch c {
	case 0xcb:
		s, ok := r.take(8)
		if !ok {
			return 0, false
		}
		return math.Float64frombits(binary.BigEndian.Uint64(s)), true
	case 0xca:
		s, ok := r.take(4)
		if !ok {
			return 0, false
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(s))), true
	}
	r.i-- // an integer-valued sum written as an integer
	v, ok := r.int()
	return float64(v), ok
}

// sources reads the partition → offset map; nil when it is empty, as
// moviedoc.FromDocument returns it.
func (r *mpReader) sources() (map[int32]int64, bool) {
	n, ok := r.mapLen()
	if !ok {
		return nil, false
	}
	var out map[int32]int64
	if n > 0 {
		out = make(map[int32]int64, n)
	}
	for range n {
		k, ok := r.str()
		if !ok {
			return nil, false
		}
		p, ok := parsePartition(k)
		if !ok {
			return nil, false
		}
		off, ok := r.int()
		if !ok {
			return nil, false
		}
		out[p] = off
	}
	return out, true
}

// parsePartition parses a non-negative decimal int32.
func parsePartition(k []byte) (int32, bool) {
	if len(k) == 0 || len(k) > 10 {
		return 0, false
	}
	var v int64
	for _, c := range k {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return int32(v), v <= math.MaxInt32
}
