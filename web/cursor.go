package web

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"

	"github.com/keepstate/keepstate/engine"
)

// A cursor of GET /movies is opaque to clients: base64url (no padding) of
//
//	version (1 byte) | float64 bits of the average (8, big-endian) |
//	movie id (8, big-endian) | CRC-32C of the previous 17 bytes (4)
//
// The checksum detects edited or truncated cursors; it is not a secret (a
// forged cursor only selects a starting position, which any client may do
// with minAvg/maxAvg). Cursors stay valid across restarts and instances.
// GET /movies keeps this form, not the movie table's own cursors (see
// encodeTableCursor), so that clients' cursors keep working: the movie id's
// 8 bytes are the table's key, so it is a position in the table's avg index.
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

// encodeCursor returns the opaque form of c, a position in the movie
// table's avg index.
func encodeCursor(c engine.IndexCursor) string {
	var b [cursorLen]byte
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], math.Float64bits(c.Value.Num))
	binary.BigEndian.PutUint64(b[9:17], uint64(movieID(c.Key)))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[:cursorPayload], cursorTable))
	return cursorEncoding.EncodeToString(b[:])
}

// decodeCursor parses a cursor made by encodeCursor. It returns
// errBadCursor for anything else, including a cursor whose average is not
// a finite number.
func decodeCursor(s string) (engine.IndexCursor, error) {
	if len(s) != cursorEncoding.EncodedLen(cursorLen) {
		return engine.IndexCursor{}, errBadCursor
	}
	b, err := cursorEncoding.DecodeString(s)
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion {
		return engine.IndexCursor{}, errBadCursor
	}
	if crc32.Checksum(b[:cursorPayload], cursorTable) != binary.BigEndian.Uint32(b[17:]) {
		return engine.IndexCursor{}, errBadCursor
	}
	avg := math.Float64frombits(binary.BigEndian.Uint64(b[1:9]))
	if math.IsNaN(avg) || math.IsInf(avg, 0) {
		return engine.IndexCursor{}, errBadCursor
	}
	return engine.IndexCursor{Value: engine.Num(avg), Key: b[9:17:17]}, nil
}
