package docstore

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"

	"github.com/keepstate/keepstate/engine"
	"github.com/vmihailenco/msgpack/v5"
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

// tableEncoder encodes table documents as Clover stores documents
// (msgpack of the field map, d.Encode's format) without building Clover's
// map: _id as the key's hex string, key and value as msgpack bin
// (decoding to []byte), partition
// and version as int64, sources as a map of decimal partitions to
// offsets, index as a map of index names to float64 or string. A nil
// Value, Sources or Index is stored as nil, an empty one as empty, so a
// document reads back as written. Used by one goroutine; the returned
// slice is valid until the next call.
type tableEncoder struct {
	buf  bytes.Buffer
	enc  *msgpack.Encoder
	keys []int32
	id   []byte
}

func newTableEncoder() *tableEncoder {
	e := &tableEncoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}

// encode returns the stored form of the validated document doc.
func (e *tableEncoder) encode(spec engine.TableSpec, doc engine.Doc) ([]byte, error) {
	e.buf.Reset()
	enc := e.enc
	e.id = hex.AppendEncode(e.id[:0], doc.Key)
	field := func(name string) error { return enc.EncodeString(name) }
	err := firstErr(
		enc.EncodeMapLen(7),
		field(tfID), enc.EncodeString(string(e.id)),
		field(tfKey), enc.EncodeBytes(doc.Key),
		field(tfPartition), enc.EncodeInt64(int64(doc.Partition)),
		field(tfVersion), enc.EncodeInt64(doc.Version),
		field(tfValue), enc.EncodeBytes(doc.Value),
		field(tfSources),
	)
	if err != nil {
		return nil, err
	}
	if err := e.sources(doc.Sources); err != nil {
		return nil, err
	}
	if err := field(tfIndex); err != nil {
		return nil, err
	}
	if doc.Index == nil {
		err = enc.EncodeNil()
	} else {
		err = e.index(spec, doc.Index)
	}
	if err != nil {
		return nil, err
	}
	return e.buf.Bytes(), nil
}

func (e *tableEncoder) sources(src map[int32]int64) error {
	if src == nil {
		return e.enc.EncodeNil()
	}
	e.keys = e.keys[:0]
	for p := range src {
		e.keys = append(e.keys, p)
	}
	slices.Sort(e.keys)
	if err := e.enc.EncodeMapLen(len(e.keys)); err != nil {
		return err
	}
	for _, p := range e.keys {
		if err := firstErr(e.enc.EncodeString(strconv.FormatInt(int64(p), 10)), e.enc.EncodeInt64(src[p])); err != nil {
			return err
		}
	}
	return nil
}

func (e *tableEncoder) index(spec engine.TableSpec, vals []engine.IndexValue) error {
	if err := e.enc.EncodeMapLen(len(spec.Indexes)); err != nil {
		return err
	}
	for i, ix := range spec.Indexes {
		var err error
		if ix.Kind == engine.IndexNumber {
			err = firstErr(e.enc.EncodeString(ix.Name), e.enc.EncodeFloat64(vals[i].Num))
		} else {
			err = firstErr(e.enc.EncodeString(ix.Name), e.enc.EncodeString(vals[i].Str))
		}
		if err != nil {
			return err
		}
	}
	return nil
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
