package web

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"

	"github.com/keepstate/keepstate/engine"
)

// A cursor is opaque to clients: base64url (no padding) of
//
//	version (1 byte) | float64 bits of the average (8, big-endian) |
//	movie id (8, big-endian) | CRC-32C of the previous 17 bytes (4)
//
// The checksum detects edited or truncated cursors; it is not a secret (a
// forged cursor only selects a starting position, which any client may do
// with minAvg/maxAvg). Cursors stay valid across restarts and instances.
const (
	cursorVersion = 1
	cursorPayload = 1 + 8 + 8
	cursorLen     = cursorPayload + 4
)

var (
	cursorTable    = crc32.MakeTable(crc32.Castagnoli)
	cursorEncoding = base64.RawURLEncoding.Strict()
	errBadCursor   = errors.New("malformed cursor")
)

// encodeCursor returns the opaque form of c.
func encodeCursor(c engine.Cursor) string {
	var b [cursorLen]byte
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], math.Float64bits(c.Avg))
	binary.BigEndian.PutUint64(b[9:17], uint64(c.MovieID))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[:cursorPayload], cursorTable))
	return cursorEncoding.EncodeToString(b[:])
}

// decodeCursor parses a cursor made by encodeCursor. It returns
// errBadCursor for anything else, including a cursor whose average is not
// a finite number.
func decodeCursor(s string) (engine.Cursor, error) {
	if len(s) != cursorEncoding.EncodedLen(cursorLen) {
		return engine.Cursor{}, errBadCursor
	}
	b, err := cursorEncoding.DecodeString(s)
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion {
		return engine.Cursor{}, errBadCursor
	}
	if crc32.Checksum(b[:cursorPayload], cursorTable) != binary.BigEndian.Uint32(b[17:]) {
		return engine.Cursor{}, errBadCursor
	}
	avg := math.Float64frombits(binary.BigEndian.Uint64(b[1:9]))
	if math.IsNaN(avg) || math.IsInf(avg, 0) {
		return engine.Cursor{}, errBadCursor
	}
	return engine.Cursor{Avg: avg, MovieID: int64(binary.BigEndian.Uint64(b[9:17]))}, nil
}
