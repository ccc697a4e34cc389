package docstore

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
	"github.com/vmihailenco/msgpack/v5"
)

// docEncoder encodes documents the way Clover stores them (d.Encode is
// msgpack of the document's field map), without building the map: Clover's
// Document.SetAll normalizes every value by reflection, which cost more
// than the rest of a bulk load together. The bytes decode (d.Decode) to
// the same fields as d.Encode(moviedoc.ToDocument(m)); TestEncodeMatchesClover pins
// that. A docEncoder is used by one goroutine; the returned slice is valid
// until the next call.
type docEncoder struct {
	buf  bytes.Buffer
	enc  *msgpack.Encoder
	keys []int32
	str  []byte // scratch for the _id and rank strings (64 bytes)
}

func newDocEncoder() *docEncoder {
	e := &docEncoder{str: make([]byte, 0, 64)}
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}

// encode returns the stored form of the validated aggregate m.
func (e *docEncoder) encode(m engine.MovieStats) ([]byte, error) {
	e.buf.Reset()
	enc := e.enc
	avg := m.Avg()
	ints := func(name string, v int64) error {
		if err := enc.EncodeString(name); err != nil {
			return err
		}
		return enc.EncodeInt64(v) // 9 bytes, as msgpack.Marshal writes an int64: decodes to int64, which Clover's comparisons need
	}
	floats := func(name string, v float64) error {
		if err := enc.EncodeString(name); err != nil {
			return err
		}
		return enc.EncodeFloat64(v)
	}
	// strs writes a string field of at most 255 bytes as EncodeString
	// would (the encoder writes straight to e.buf), without converting v
	// to a string first.
	strs := func(name string, v []byte) error {
		if err := enc.EncodeString(name); err != nil {
			return err
		}
		if n := len(v); n < 32 {
			e.buf.WriteByte(0xa0 | byte(n)) // fixstr
		} else {
			e.buf.Write([]byte{0xd9, byte(n)}) // str8: ids and ranks are 36 and 32 bytes
		}
		e.buf.Write(v)
		return nil
	}
	err := firstErr(
		enc.EncodeMapLen(9),
		strs(moviedoc.FieldID, moviedoc.AppendDocID(e.str[:0], m.MovieID)), // written before the rank reuses e.str: calls run left to right
		ints(moviedoc.FieldMovie, m.MovieID),
		ints(moviedoc.FieldPartition, int64(m.Partition)),
		ints(moviedoc.FieldCount, m.Count),
		floats(moviedoc.FieldSum, m.Sum),
		floats(moviedoc.FieldAvg, avg),
		ints(moviedoc.FieldVersion, m.Version),
		strs(fieldRank, moviedoc.AppendRankKey(e.str[:0], avg, m.MovieID)),
		enc.EncodeString(moviedoc.FieldSources),
	)
	if err != nil {
		return nil, err
	}
	e.keys = e.keys[:0]
	for p := range m.Sources {
		e.keys = append(e.keys, p)
	}
	slices.Sort(e.keys)
	if err := enc.EncodeMapLen(len(e.keys)); err != nil {
		return nil, err
	}
	for _, p := range e.keys {
		if err := ints(strconv.FormatInt(int64(p), 10), m.Sources[p]); err != nil {
			return nil, err
		}
	}
	return e.buf.Bytes(), nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// memberMark is the value of every members key written since format v3:
// nothing. The key alone says that a movie belongs to a partition; a
// movie's average and version are read from its document, so an update
// that keeps the partition does not rewrite the key. Stores of format v2
// hold the average and version there, which v3 ignores (see formatVersion).
var memberMark = []byte{}
