package docstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math"

	"github.com/keepstate/keepstate/engine"
)

// Each table is a Clover collection, "t_<name>": one document per key,
// under Clover's document key "c:t_<name>;d:<_id>" in the nsClover
// namespace, with _id the key in lowercase hex (so documents sort like
// keys) and the fields key, partition, version, sources, value and index
// (a map of index name to number or string). Clover's collection metadata
// ("coll:t_<name>") keeps its size. Clover's own indexes do not fit (its
// range index needs 36-byte ids and orders ties by id), so the rest lives
// in the nsTables namespace under a prefix per table ('t', the name, 0x00:
// names hold no 0x00, so no table's prefix is another's):
//
//	's'                          the spec (JSON)
//	'e' partition                last claimed epoch
//	'c' partition                next changelog offset (checkpoint)
//	'm' partition key            members (empty values since format v3)
//	'i' position value key       index entries (empty values)
//
// Partitions are 4 bytes big-endian, index positions one byte (declaration
// order). An index entry's value is order-preserving (appendIndexValue),
// and the key ends the entry, so entries sort by (value, key) as
// engine.TableSpec.Before orders an ascending query; a descending query
// walks them backwards.

// memberMark is the value of every members key: nothing (v2 stores held
// more, which v3 ignores), so an update that keeps the partition does not
// rewrite the key.
var memberMark = []byte{}

// Key families inside a table's prefix.
const (
	tabSpec       byte = 's'
	tabEpochs     byte = 'e'
	tabCheckpoint byte = 'c'
	tabMembers    byte = 'm'
	tabIndex      byte = 'i'
)

// tableCollection returns the Clover collection of table name.
func tableCollection(name string) string { return "t_" + name }

// tableLayout holds the key prefixes of one table.
type tableLayout struct {
	prefix  []byte // nsTables, name, 0x00
	docs    []byte // nsClover + Clover's document key prefix of the collection
	collKey []byte // nsClover + Clover's collection metadata key
}

func newTableLayout(name string) tableLayout {
	coll := tableCollection(name)
	return tableLayout{prefix: append(append([]byte{nsTables}, name...), 0),
		docs: nsKey(nsClover, []byte("c:"+coll+";d:")), collKey: nsKey(nsClover, []byte("coll:"+coll))}
}

// family returns the prefix of key family f.
func (l tableLayout) family(f byte) []byte {
	return append(append(make([]byte, 0, len(l.prefix)+1+4+8), l.prefix...), f)
}

// partKey returns the key of partition p in family f (epochs, checkpoints)
// or the prefix of p's members.
func (l tableLayout) partKey(f byte, p int32) []byte {
	return binary.BigEndian.AppendUint32(l.family(f), uint32(p))
}

// memberKey returns the members key of key in partition p.
func (l tableLayout) memberKey(p int32, key []byte) []byte {
	return append(l.partKey(tabMembers, p), key...)
}

// indexPrefix returns the prefix of the entries of the index at pos.
func (l tableLayout) indexPrefix(pos int) []byte { return append(l.family(tabIndex), byte(pos)) }

// docKey appends the document key of key (its hex _id) to buf.
func (l tableLayout) docKey(buf, key []byte) []byte {
	buf = append(buf, l.docs...)
	return hex.AppendEncode(buf, key)
}

// appendIndexValue appends the order-preserving encoding of v (an index
// value of kind k) to buf: a number as orderedFloat (8 bytes), a string as
// its bytes and a 0x00 (stored values hold none, engine.Doc.Validate), so
// it sorts before every longer string it prefixes, whatever key follows.
func appendIndexValue(buf []byte, v engine.IndexValue, k engine.IndexKind) []byte {
	if k == engine.IndexNumber {
		return binary.BigEndian.AppendUint64(buf, orderedFloat(v.Num))
	}
	return append(append(buf, v.Str...), 0)
}

// signBit is a float64's (and an int64's) sign bit.
const signBit = 1 << 63

// orderedFloat maps a non-NaN float to a uint64 with the same order
// (-0 and +0 map to the same value).
func orderedFloat(f float64) uint64 {
	if f == 0 {
		f = 0 // -0 -> +0
	}
	bits := math.Float64bits(f)
	if bits&signBit != 0 {
		return ^bits
	}
	return bits | signBit
}

// orderedFloatValue inverts orderedFloat.
func orderedFloatValue(u uint64) float64 {
	if u&signBit != 0 {
		return math.Float64frombits(u &^ signBit)
	}
	return math.Float64frombits(^u)
}

// splitIndexValue reads the index value of kind k at the start of b (an
// index entry's tail) and returns it and the rest.
func splitIndexValue(b []byte, k engine.IndexKind) (engine.IndexValue, []byte, bool) {
	if k == engine.IndexNumber {
		if len(b) < 8 {
			return engine.IndexValue{}, nil, false
		}
		return engine.Num(orderedFloatValue(binary.BigEndian.Uint64(b))), b[8:], true
	}
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return engine.IndexValue{}, nil, false
	}
	return engine.Str(string(b[:i])), b[i+1:], true
}

// indexEntry appends the key of doc's entry in the index at pos to buf.
func (l tableLayout) indexEntry(buf []byte, pos int, v engine.IndexValue, k engine.IndexKind, key []byte) []byte {
	buf = appendIndexValue(append(append(append(buf, l.prefix...), tabIndex), byte(pos)), v, k)
	return append(buf, key...)
}

// rawIndexEntry appends the key of an entry in the index at pos to buf,
// from the value's encoding (appendIndexValue).
func (l tableLayout) rawIndexEntry(buf []byte, pos int, value, key []byte) []byte {
	buf = append(append(append(buf, l.prefix...), tabIndex), byte(pos))
	return append(append(buf, value...), key...)
}
