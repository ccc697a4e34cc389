package docstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/keepstate/keepstate/engine"
)

// Fields of a table's Clover documents.
const (
	tfID        = "_id"
	tfKey       = "key"
	tfPartition = "partition"
	tfVersion   = "version"
	tfSources   = "sources"
	tfValue     = "value"
	tfIndex     = "index"
)

// tableEncoder encodes table documents as Clover stores them (msgpack of
// the field map) without Clover's map and reflection: _id as the key's hex
// string, key and value as bin, partition and version as int64, sources as
// a map of decimal partitions to offsets, index as a map of index names to
// float64 or string; nil stays nil and empty stays empty. Its bytes are
// vmihailenco/msgpack's Encoder's (TestTableEncoderMatchesMsgpack). Used
// by one goroutine; the returned slice is valid until the next call.
type tableEncoder struct {
	buf  []byte
	keys []int32
}

func newTableEncoder() *tableEncoder { return &tableEncoder{buf: make([]byte, 0, 256)} }

// encode returns the stored form of the validated document doc.
func (e *tableEncoder) encode(spec engine.TableSpec, doc engine.Doc) []byte {
	b := mpMapLen(e.buf[:0], 7)
	b = mpStr(b, tfID)
	b = mpStrLen(b, hex.EncodedLen(len(doc.Key)))
	b = hex.AppendEncode(b, doc.Key)
	b = mpBin(mpStr(b, tfKey), doc.Key)
	b = mpInt64(mpStr(b, tfPartition), int64(doc.Partition))
	b = mpInt64(mpStr(b, tfVersion), doc.Version)
	b = mpBin(mpStr(b, tfValue), doc.Value)
	b = mpStr(b, tfSources)
	if doc.Sources == nil {
		b = append(b, mpNil)
	} else {
		e.keys = e.keys[:0]
		for p := range doc.Sources {
			e.keys = append(e.keys, p)
		}
		slices.Sort(e.keys)
		b = mpMapLen(b, len(e.keys))
		for _, p := range e.keys {
			n := len(b)
			b = strconv.AppendInt(mpStrLen(b, 0), int64(p), 10) // at most 11 digits: a fixstr
			b[n] = 0xa0 | byte(len(b)-n-1)
			b = mpInt64(b, doc.Sources[p])
		}
	}
	b = mpStr(b, tfIndex)
	if doc.Index == nil {
		b = append(b, mpNil)
	} else {
		b = mpMapLen(b, len(spec.Indexes))
		for i, ix := range spec.Indexes {
			b = mpStr(b, ix.Name)
			if ix.Kind == engine.IndexNumber {
				b = binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(doc.Index[i].Num))
			} else {
				b = mpStr(b, doc.Index[i].Str)
			}
		}
	}
	e.buf = b
	return b
}

// mpNil is msgpack's nil.
const mpNil = 0xc0

// mpMapLen appends a msgpack map header of n entries.
func mpMapLen(b []byte, n int) []byte {
	if n < 16 {
		return append(b, 0x80|byte(n))
	}
	return mpHead(b, n, 0, 0xde, 0xdf)
}

// mpStrLen appends a msgpack string header of n bytes.
func mpStrLen(b []byte, n int) []byte {
	if n < 32 {
		return append(b, 0xa0|byte(n))
	}
	return mpHead(b, n, 0xd9, 0xda, 0xdb)
}

// mpHead appends a msgpack header of length n in the smallest of the
// 8-bit (c8, 0 for none), 16-bit and 32-bit forms.
func mpHead(b []byte, n int, c8, c16, c32 byte) []byte {
	switch {
	case c8 != 0 && n < 256:
		return append(b, c8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, c16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, c32), uint32(n))
}

// mpStr appends s as a msgpack string.
func mpStr(b []byte, s string) []byte { return append(mpStrLen(b, len(s)), s...) }

// mpBin appends v as msgpack bin, or nil for a nil slice.
func mpBin(b, v []byte) []byte {
	if v == nil {
		return append(b, mpNil)
	}
	return append(mpHead(b, len(v), 0xc4, 0xc5, 0xc6), v...)
}

// mpInt64 appends v as a msgpack int64 (always 9 bytes, as the Encoder's
// EncodeInt64).
func mpInt64(b []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

// decodeTableDoc reads a stored table document (as tableEncoder writes
// it, or as Clover rewrites it: any field order, any integer width). With
// head set it skips what a write does not need (the value and sources):
// Key then aliases raw, valid until raw changes.
func decodeTableDoc(raw []byte, spec engine.TableSpec, head bool) (engine.Doc, error) {
	var doc engine.Doc
	r := mpReader{b: raw}
	n, ok := r.mapLen()
	if !ok {
		return doc, fmt.Errorf("table %s: document is not a map", spec.Name)
	}
	const need = 1<<3 - 1 // key, partition, version
	seen := 0
	for range n {
		name, ok := r.str()
		if !ok {
			return doc, fmt.Errorf("table %s: malformed field name", spec.Name)
		}
		switch string(name) {
		case tfID:
			_, ok = r.str()
		case tfKey:
			doc.Key, ok = r.bin()
			ok = ok && doc.Key != nil
			if ok && !head {
				doc.Key = bytes.Clone(doc.Key)
			}
			seen |= 1
		case tfPartition:
			var p int64
			p, ok = r.int()
			ok = ok && p >= 0 && p <= 1<<31-1
			doc.Partition = int32(p)
			seen |= 2
		case tfVersion:
			doc.Version, ok = r.int()
			seen |= 4
		case tfValue:
			doc.Value, ok = r.bin()
			if ok && !head {
				doc.Value = bytes.Clone(doc.Value)
			} else {
				doc.Value = nil
			}
		case tfSources:
			doc.Sources, ok = r.tableSources()
		case tfIndex:
			doc.Index, ok = r.tableIndex(spec)
		default:
			return doc, fmt.Errorf("table %s: unknown document field %q", spec.Name, name)
		}
		if !ok {
			return doc, fmt.Errorf("table %s: malformed document field %q", spec.Name, name)
		}
	}
	if seen != need || !r.done() {
		return doc, fmt.Errorf("table %s: incomplete document", spec.Name)
	}
	if len(doc.Index) != len(spec.Indexes) {
		return doc, fmt.Errorf("table %s: document has %d index values for %d indexes", spec.Name, len(doc.Index), len(spec.Indexes))
	}
	return doc, nil
}

// nil reports (and consumes) a msgpack nil.
func (r *mpReader) nil() bool {
	if r.i < len(r.b) && r.b[r.i] == 0xc0 {
		r.i++
		return true
	}
	return false
}

// bin reads a msgpack bin (or nil, returned as a nil slice).
func (r *mpReader) bin() ([]byte, bool) {
	if r.nil() {
		return nil, true
	}
	c, ok := r.byte()
	if !ok || c < 0xc4 || c > 0xc6 {
		return nil, false
	}
	n, ok := r.uint(1 << (c - 0xc4))
	if !ok || n > uint64(len(r.b)) {
		return nil, false
	}
	return r.take(int(n))
}

// tableSources reads the sources map: nil for a msgpack nil, empty (not
// nil) for an empty map.
func (r *mpReader) tableSources() (map[int32]int64, bool) {
	if r.nil() {
		return nil, true
	}
	m, ok := r.sources()
	if ok && m == nil {
		m = map[int32]int64{}
	}
	return m, ok
}

// tableIndex reads the index map into declaration order: nil for a
// msgpack nil.
func (r *mpReader) tableIndex(spec engine.TableSpec) ([]engine.IndexValue, bool) {
	if r.nil() {
		return nil, true
	}
	n, ok := r.mapLen()
	if !ok || n != len(spec.Indexes) {
		return nil, false
	}
	out := make([]engine.IndexValue, n)
	got := 0
	for range n {
		name, ok := r.str()
		if !ok {
			return nil, false
		}
		pos, ix, found := spec.Index(string(name))
		if !found || got&(1<<pos) != 0 {
			return nil, false
		}
		got |= 1 << pos
		if ix.Kind == engine.IndexNumber {
			out[pos].Num, ok = r.float()
		} else {
			var s []byte
			s, ok = r.str()
			out[pos].Str = string(s)
		}
		if !ok {
			return nil, false
		}
	}
	return out, true
}
