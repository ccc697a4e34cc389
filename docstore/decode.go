package docstore

import "math"

// mpReader reads the few msgpack formats stored documents use: table
// documents (decodeTableDoc) and the movie layout's (decodeOldMovie). Its
// methods report false for anything else or a truncated input.
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
	case c == 0xde || c == 0xdf: // map 16, 32
		n, ok := r.uint(2 << (c - 0xde))
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
	case c >= 0xd9 && c <= 0xdb: // str 8, 16, 32
		n, ok = r.uint(1 << (c - 0xd9))
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
	case c >= 0xcc && c <= 0xcf: // uint 8, 16, 32, 64
		v, ok := r.uint(1 << (c - 0xcc))
		return int64(v), ok && v <= math.MaxInt64
	case c >= 0xd0 && c <= 0xd3: // int 8, 16, 32, 64: sign-extended
		n := 1 << (c - 0xd0)
		v, ok := r.uint(n)
		shift := 64 - 8*n
		return int64(v<<shift) >> shift, ok
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
		v, ok := r.uint(8)
		return math.Float64frombits(v), ok
	case 0xca:
		v, ok := r.uint(4)
		return float64(math.Float32frombits(uint32(v))), ok
	}
	r.i-- // an integer-valued sum written as an integer
	v, ok := r.int()
	return float64(v), ok
}

// sources reads the partition → offset map (decimal partition strings);
// nil when it is empty.
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
