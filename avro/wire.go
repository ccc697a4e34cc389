package avro

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// kind is an Avro primitive type the fast decoder can read or skip.
type kind uint8

const (
	kindNull kind = iota + 1
	kindBoolean
	kindInt
	kindLong
	kindFloat
	kindDouble
	kindBytes
	kindString
)

var kindNames = map[string]kind{
	"null": kindNull, "boolean": kindBoolean, "int": kindInt, "long": kindLong,
	"float": kindFloat, "double": kindDouble, "bytes": kindBytes, "string": kindString,
}

// errShort is returned (wrapped into ErrDecode by callers) when the payload
// ends inside a value.
var errShort = errors.New("payload truncated")

// readLong reads a zigzag varint long exactly as goavro does (goavro is the
// reference of the slow path; both must accept and reject the same bytes).
// goavro reads an int with the same loop.
func readLong(b []byte) (int64, int, error) {
	var value uint64
	var shift uint
	for i := 0; i < len(b); i++ {
		c := b[i]
		value |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return int64(value>>1) ^ -int64(value&1), i + 1, nil
		}
		shift += 7
	}
	return 0, 0, errShort
}

// fastRecord decodes a writer schema that is a record of primitive fields
// without going through goavro's generic map, allocating nothing.
type fastRecord []kind

// decodePair reads the whole record in b and returns field idIdx as an
// integer and field numIdx as a float64. Field kinds were checked when the
// plan was made: idIdx is int or long, numIdx is int, long, float or double.
func (f fastRecord) decodePair(b []byte, idIdx, numIdx int) (int64, float64, error) {
	var id int64
	var num float64
	for i, k := range f {
		var iv int64
		var fv float64
		switch k {
		case kindNull:
		case kindBoolean:
			if len(b) < 1 {
				return 0, 0, fmt.Errorf("field %d (boolean): %w", i, errShort)
			}
			if b[0] > 1 {
				return 0, 0, fmt.Errorf("field %d: boolean byte %d", i, b[0])
			}
			b = b[1:]
		case kindInt, kindLong:
			v, n, err := readLong(b)
			if err != nil {
				return 0, 0, fmt.Errorf("field %d (%s): %w", i, [...]string{kindInt: "int", kindLong: "long"}[k], err)
			}
			if k == kindInt {
				v = int64(int32(v)) // goavro keeps an int's low 32 bits
			}
			iv, fv, b = v, float64(v), b[n:]
		case kindFloat:
			if len(b) < 4 {
				return 0, 0, fmt.Errorf("field %d (float): %w", i, errShort)
			}
			fv, b = float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), b[4:]
		case kindDouble:
			if len(b) < 8 {
				return 0, 0, fmt.Errorf("field %d (double): %w", i, errShort)
			}
			fv, b = math.Float64frombits(binary.LittleEndian.Uint64(b)), b[8:]
		case kindBytes, kindString:
			size, n, err := readLong(b)
			if err != nil {
				return 0, 0, fmt.Errorf("field %d (length): %w", i, err)
			}
			b = b[n:]
			if size < 0 {
				return 0, 0, fmt.Errorf("field %d: negative length %d", i, size)
			}
			if size > int64(len(b)) {
				return 0, 0, fmt.Errorf("field %d (%d bytes): %w", i, size, errShort)
			}
			b = b[size:]
		}
		if i == idIdx {
			id = iv
		}
		if i == numIdx {
			num = fv
		}
	}
	if len(b) != 0 {
		return 0, 0, fmt.Errorf("%d trailing bytes after the record", len(b))
	}
	return id, num, nil
}

// encodeFramed returns the Confluent-framed record {long l, double d} for
// schema id: a zigzag varint (binary.AppendVarint is zigzag + LEB128,
// Avro's long encoding), then 8 bytes little-endian IEEE 754.
func encodeFramed(id int, l int64, d float64) []byte {
	b := appendHeader(make([]byte, 0, headerLen+binary.MaxVarintLen64+8), id)
	b = binary.AppendVarint(b, l)
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(d))
}
