package avro

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

const (
	magicByte = 0 // opens every Confluent-framed record
	headerLen = 5 // magic byte + schema id
)

// Frame returns the Confluent wire format of an Avro payload written with
// schema id: magic byte 0, id as 4 bytes big-endian (the low 32 bits of id;
// registry ids fit), then a copy of payload. It is pure.
func Frame(id int, payload []byte) []byte {
	return append(appendHeader(make([]byte, 0, headerLen+len(payload)), id), payload...)
}

// appendHeader appends the frame header of schema id to b.
func appendHeader(b []byte, id int) []byte {
	return binary.BigEndian.AppendUint32(append(b, magicByte), uint32(id))
}

// Unframe splits a Confluent-framed record into its schema id (a signed
// 32-bit value, as Java reads it) and Avro payload, which aliases b. It
// returns an error wrapping ErrNotFramed when b is shorter than 5 bytes or
// its magic byte is not 0. An empty payload is not an error here. It is pure.
func Unframe(b []byte) (id int, payload []byte, err error) {
	if len(b) < headerLen {
		return 0, nil, fmt.Errorf("%w: %d bytes, want at least %d", ErrNotFramed, len(b), headerLen)
	}
	if b[0] != magicByte {
		return 0, nil, fmt.Errorf("%w: magic byte %d, want %d", ErrNotFramed, b[0], magicByte)
	}
	return int(int32(binary.BigEndian.Uint32(b[1:headerLen]))), b[headerLen:], nil
}

// encodeFramed returns the Confluent-framed record {long l, double d} for
// schema id: a zigzag varint (binary.AppendVarint is zigzag + LEB128,
// Avro's long encoding), then 8 bytes little-endian IEEE 754.
func encodeFramed(id int, l int64, d float64) []byte {
	b := binary.AppendVarint(appendHeader(make([]byte, 0, headerLen+binary.MaxVarintLen64+8), id), l)
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(d))
}

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

var (
	// kindNames are the Avro names of the kinds; kind 0 is any other type.
	kindNames = [...]string{"", "null", "boolean", "int", "long", "float", "double", "bytes", "string"}
	// kindSizes are the sizes of the fixed-size kinds.
	kindSizes = [kindString + 1]int{kindBoolean: 1, kindFloat: 4, kindDouble: 8}
	// errShort (wrapped into ErrDecode by callers) means the payload ends inside a value.
	errShort = errors.New("payload truncated")
)

// readLong reads a zigzag varint long (or int) exactly as goavro, the slow
// path, does: both must accept and reject the same bytes.
func readLong(b []byte) (int64, int, error) {
	var value uint64
	var shift uint
	for i, c := range b {
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
func (f fastRecord) decodePair(b []byte, idIdx, numIdx int) (id int64, num float64, err error) {
	for i, k := range f {
		var iv int64
		var fv float64
		n := kindSizes[k] // bytes of the value; set below for the other kinds
		if len(b) < n {
			return 0, 0, fmt.Errorf("field %d (%s): %w", i, kindNames[k], errShort)
		}
		switch k {
		case kindBoolean:
			if b[0] > 1 {
				return 0, 0, fmt.Errorf("field %d: boolean byte %d", i, b[0])
			}
		case kindInt, kindLong:
			if iv, n, err = readLong(b); err != nil {
				return 0, 0, fmt.Errorf("field %d (%s): %w", i, kindNames[k], err)
			}
			if k == kindInt {
				iv = int64(int32(iv)) // goavro keeps an int's low 32 bits
			}
			fv = float64(iv)
		case kindFloat:
			fv = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		case kindDouble:
			fv = math.Float64frombits(binary.LittleEndian.Uint64(b))
		case kindBytes, kindString:
			size, m, err := readLong(b)
			switch {
			case err != nil:
				return 0, 0, fmt.Errorf("field %d (length): %w", i, err)
			case size < 0:
				return 0, 0, fmt.Errorf("field %d: negative length %d", i, size)
			case size > int64(len(b)-m):
				return 0, 0, fmt.Errorf("field %d (%d bytes): %w", i, size, errShort)
			}
			n = m + int(size)
		}
		b = b[n:]
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
