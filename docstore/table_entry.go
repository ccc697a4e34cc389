package docstore

import (
	"bytes"

	"github.com/keepstate/keepstate/engine"
)

// maxCachedValue is the largest document value a write cache entry keeps
// for Load (tableCaches.serve); a larger one is read from the store. The
// movie job's values are 16 bytes.
const maxCachedValue = 64

// tablePrior is what the write cache holds of a key: what a write needs of
// its stored document (whether it exists, its version, partition and index
// values) and, when whole, its value and sources too, so that Load rebuilds
// the document from it. An entry is whole when made from a whole document
// (a write, a Load, warm-up; not a write's read of the head alone) whose
// value is at most maxCachedValue bytes and whose sources hold at most one
// partition (the movie job's). The value and the index values share one
// allocation (data). Entries are never changed in place.
type tablePrior struct {
	priorHead
	// data is the value (whole entries only), then each index value as
	// its index entry encodes it (appendIndexValue).
	data []byte
}

// priorHead is a tablePrior's fixed-size part.
type priorHead struct {
	version  int64
	srcOff   int64 // the one source's offset (src == srcOne)
	part     int32
	srcPart  int32 // the one source's partition (src == srcOne)
	vlen     int32 // the value's bytes at the head of data; -1 for a nil value
	exists   bool
	whole    bool // the value and the sources are kept: Load can rebuild the document
	src      srcKind
	nilIndex bool // a nil Doc.Index (a table without indexes) reads back as nil
}

// srcKind tells nil sources from empty ones and from one entry, as the
// stored document does.
type srcKind uint8

const (
	srcNil srcKind = iota
	srcEmpty
	srcOne
)

// readPriors calls put with the entry (not whole: no value, no sources)
// of the stored document of each of keys (as readDocs) that has one, for
// a write.
func (t *table) readPriors(r kvReader, keys [][]byte, put func(i int, p tablePrior)) error {
	return t.readDocs(r, keys, func(i int, raw []byte) error {
		t.s.counts.writeReads.Add(1)
		d, err := decodeTableDoc(raw, t.spec, true)
		if err == nil {
			data := appendIndexValues(make([]byte, 0, indexBytes(t.spec, d.Index)), t.spec, d.Index)
			put(i, tablePrior{priorHead: priorHead{exists: true, version: d.Version, part: d.Partition}, data: data})
		}
		return err
	})
}

// docPrior returns the entry of d (valid for spec), whole when d is small
// enough (see tablePrior); it copies what it keeps.
func docPrior(spec engine.TableSpec, d engine.Doc) tablePrior {
	p := tablePrior{priorHead: priorHead{exists: true, version: d.Version, part: d.Partition, nilIndex: d.Index == nil}}
	p.whole = len(d.Value) <= maxCachedValue && len(d.Sources) <= 1
	var value []byte
	if p.whole {
		switch value = d.Value; {
		case d.Sources == nil:
			p.src = srcNil
		case len(d.Sources) == 0:
			p.src = srcEmpty
		default:
			p.src = srcOne
			for part, off := range d.Sources {
				p.srcPart, p.srcOff = part, off
			}
		}
		p.vlen = int32(len(d.Value))
		if d.Value == nil {
			p.vlen = -1
		}
	}
	p.data = append(make([]byte, 0, len(value)+indexBytes(spec, d.Index)), value...)
	p.data = appendIndexValues(p.data, spec, d.Index)
	return p
}

// indexBytes is the size of index's encoding.
func indexBytes(spec engine.TableSpec, index []engine.IndexValue) int {
	n := 0
	for pos, ix := range spec.Indexes {
		if ix.Kind == engine.IndexNumber {
			n += 8
		} else {
			n += len(index[pos].Str) + 1
		}
	}
	return n
}

// appendIndexValues appends the encoding of each of index to buf.
func appendIndexValues(buf []byte, spec engine.TableSpec, index []engine.IndexValue) []byte {
	for pos, ix := range spec.Indexes {
		buf = appendIndexValue(buf, index[pos], ix.Kind)
	}
	return buf
}

// indexData returns the encoded index values of p.
func (p tablePrior) indexData() []byte { return p.data[max(p.vlen, 0):] }

// nextIndexValue splits the encoding of one index value of kind k off the
// head of b (as appendIndexValue wrote it).
func nextIndexValue(b []byte, k engine.IndexKind) (value, rest []byte) {
	n := 8
	if k != engine.IndexNumber {
		n = bytes.IndexByte(b, 0) + 1
	}
	return b[:n:n], b[n:]
}

// indexValues decodes p's index values (nil when the document held nil).
func (p tablePrior) indexValues(spec engine.TableSpec) []engine.IndexValue {
	if p.nilIndex {
		return nil
	}
	out := make([]engine.IndexValue, len(spec.Indexes))
	b := p.indexData()
	for pos, ix := range spec.Indexes {
		out[pos], b, _ = splitIndexValue(b, ix.Kind)
	}
	return out
}

// doc rebuilds the document of key from a whole entry of a key that
// exists (the caller checks both). Everything returned is the caller's.
func (p tablePrior) doc(spec engine.TableSpec, key string) engine.Doc {
	// The key and the value share one allocation.
	buf := make([]byte, len(key)+max(int(p.vlen), 0))
	n := copy(buf, key)
	d := engine.Doc{Key: buf[:n:n], Partition: p.part, Version: p.version, Index: p.indexValues(spec)}
	if p.vlen >= 0 {
		d.Value = buf[n:]
		copy(d.Value, p.data[:p.vlen])
	}
	switch p.src {
	case srcEmpty:
		d.Sources = map[int32]int64{}
	case srcOne:
		d.Sources = map[int32]int64{p.srcPart: p.srcOff}
	}
	return d
}
