package avro

import (
	"encoding/binary"
	"fmt"
)

// magicByte opens every Confluent-framed record.
const magicByte = 0

// headerLen is the length of the Confluent frame header: magic + schema id.
const headerLen = 5

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
