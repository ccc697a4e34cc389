package web

import (
	"bytes"
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
// forged cursor only selects a starting position, as minAvg/maxAvg may).
// Cursors stay valid across restarts and instances. GET /movies keeps this
// form rather than the table's cursors so that clients' cursors keep
// working: the id's 8 bytes are the table's key.
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

// encodeCursor returns the opaque form of c, a position in the movies' avg index.
func encodeCursor(c engine.IndexCursor) string {
	var b [cursorLen]byte
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], math.Float64bits(c.Value.Num))
	binary.BigEndian.PutUint64(b[9:17], uint64(movieID(c.Key)))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[:cursorPayload], cursorTable))
	return cursorEncoding.EncodeToString(b[:])
}

// decodeCursor parses a cursor made by encodeCursor; anything else,
// including an average that is not a finite number, is errBadCursor.
func decodeCursor(s string) (engine.IndexCursor, error) {
	var b []byte
	err := errBadCursor
	if len(s) == cursorEncoding.EncodedLen(cursorLen) {
		b, err = cursorEncoding.DecodeString(s)
	}
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion ||
		crc32.Checksum(b[:cursorPayload], cursorTable) != binary.BigEndian.Uint32(b[17:]) {
		return engine.IndexCursor{}, errBadCursor
	}
	avg := math.Float64frombits(binary.BigEndian.Uint64(b[1:9]))
	if math.IsNaN(avg) || math.IsInf(avg, 0) {
		return engine.IndexCursor{}, errBadCursor
	}
	return engine.IndexCursor{Value: engine.Num(avg), Key: b[9:17:17]}, nil
}

// A table cursor is opaque to clients: base64url (no padding) of
//
//	version (1 byte) | index kind (1) |
//	value: float64 bits (8, big-endian) for a number index,
//	       uvarint length + bytes for a string index |
//	uvarint key length + key bytes |
//	CRC-32C (4, big-endian) of table name, 0, index name, 0 and the above
//
// The checksum binds the cursor to its table and index and detects edits;
// like the movie cursor it is not a secret.
const (
	tableCursorVersion = 1
	maxTableCursorLen  = 2 + binary.MaxVarintLen64 + engine.MaxIndexStringBytes + binary.MaxVarintLen64 + engine.MaxKeyBytes + 4
)

var errBadTableCursor = errors.New("malformed table cursor")

// tableCursorSum is the checksum of a cursor's payload for table and index.
func tableCursorSum(table, index string, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum([]byte(table+"\x00"+index+"\x00"), cursorTable), cursorTable, payload)
}

// encodeTableCursor returns the opaque form of c, a position in index of table.
func encodeTableCursor(table, index string, kind engine.IndexKind, c engine.IndexCursor) string {
	b := make([]byte, 0, 24+len(c.Value.Str)+len(c.Key))
	b = append(b, tableCursorVersion, byte(kind))
	if kind == engine.IndexNumber {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(c.Value.Num))
	} else {
		b = binary.AppendUvarint(b, uint64(len(c.Value.Str)))
		b = append(b, c.Value.Str...)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Key)))
	b = append(b, c.Key...)
	b = binary.BigEndian.AppendUint32(b, tableCursorSum(table, index, b))
	return cursorEncoding.EncodeToString(b)
}

// decodeTableCursor parses encodeTableCursor's form for table, index and kind.
func decodeTableCursor(table, index string, kind engine.IndexKind, s string) (engine.IndexCursor, error) {
	var b []byte
	err := errBadTableCursor
	if len(s) <= cursorEncoding.EncodedLen(maxTableCursorLen) {
		b, err = cursorEncoding.DecodeString(s)
	}
	if err != nil || len(b) < 2+4 || b[0] != tableCursorVersion || b[1] != byte(kind) ||
		tableCursorSum(table, index, b[:len(b)-4]) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return engine.IndexCursor{}, errBadTableCursor
	}
	r := b[2 : len(b)-4]
	var c engine.IndexCursor
	var ok bool
	if kind == engine.IndexNumber {
		if ok = len(r) >= 8; ok {
			c.Value, r = engine.Num(math.Float64frombits(binary.BigEndian.Uint64(r))), r[8:]
			ok = !math.IsNaN(c.Value.Num) && !math.IsInf(c.Value.Num, 0)
		}
	} else {
		var str []byte
		str, r, ok = cutUvarintBytes(r, engine.MaxIndexStringBytes)
		c.Value = engine.Str(string(str))
		ok = ok && validIndexString(c.Value.Str)
	}
	key, rest, keyOK := cutUvarintBytes(r, engine.MaxKeyBytes)
	if !ok || !keyOK || len(key) == 0 || len(rest) != 0 {
		return engine.IndexCursor{}, errBadTableCursor
	}
	c.Key = bytes.Clone(key)
	return c, nil
}

// cutUvarintBytes reads a uvarint length (at most most) and that many bytes.
func cutUvarintBytes(b []byte, most int) (field, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(most) || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}
