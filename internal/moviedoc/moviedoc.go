// Package moviedoc is the Clover document of one movie's aggregate, used
// by the Clover store (docstore): the Collection and field names, the
// document id and rank derived from a movie, and the conversion between
// engine.MovieStats and a Clover document. Every function is pure and
// safe for concurrent use.
package moviedoc

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"

	"github.com/keepstate/keepstate/engine"
	d "github.com/ostafen/clover/v2/document"
)

// Collection is the Clover Collection holding one document per movie.
const Collection = "movies"

// Document field names. Indexed names must not be prefixes of each other
// (Clover's index key prefixes would overlap).
const (
	FieldID        = d.ObjectIdField
	FieldMovie     = "movieId"
	FieldPartition = "partition"
	FieldCount     = "count"
	FieldSum       = "sum"
	FieldAvg       = "avg"
	FieldVersion   = "version"
	FieldSources   = "sources"
	FieldRank      = "rank" // indexed
)

// SignBit flips int64 order into unsigned byte order.
const SignBit = 1 << 63

// DocID returns the Clover _id of a movie: a canonical 36-character UUID
// whose first 16 hex digits are the movie id (offset so that negative ids
// sort first), so ids sort like movie ids and map back to them.
func DocID(movie int64) string { return string(AppendDocID(make([]byte, 0, 36), movie)) }

// AppendDocID appends DocID(movie) to buf, without allocating when buf
// has room.
func AppendDocID(buf []byte, movie int64) []byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(movie)^SignBit)
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return append(buf, s[:]...)
}

// OrderedFloat maps a non-NaN float to a uint64 with the same order
// (-0 and +0 map to the same value).
func OrderedFloat(f float64) uint64 {
	if f == 0 {
		f = 0 // -0 -> +0
	}
	bits := math.Float64bits(f)
	if bits&SignBit != 0 {
		return ^bits
	}
	return bits | SignBit
}

// RankKey returns the rank of (avg, movie): a 32-character lowercase hex
// string whose byte order is average descending, then movie id ascending.
func RankKey(avg float64, movie int64) string {
	return string(AppendRankKey(make([]byte, 0, 32), avg, movie))
}

// AppendRankKey appends RankKey(avg, movie) to buf, without allocating
// when buf has room.
func AppendRankKey(buf []byte, avg float64, movie int64) []byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], ^OrderedFloat(avg))
	binary.BigEndian.PutUint64(b[8:], uint64(movie)^SignBit)
	return hex.AppendEncode(buf, b[:])
}

// ToDocument converts a validated aggregate to its Clover document.
func ToDocument(m engine.MovieStats) *d.Document {
	doc := d.NewDocument()
	sources := make(map[string]interface{}, len(m.Sources))
	for p, off := range m.Sources {
		sources[strconv.FormatInt(int64(p), 10)] = off
	}
	avg := m.Avg()
	doc.SetAll(map[string]interface{}{
		FieldID:        DocID(m.MovieID),
		FieldMovie:     m.MovieID,
		FieldPartition: int64(m.Partition),
		FieldCount:     m.Count,
		FieldSum:       m.Sum,
		FieldAvg:       avg,
		FieldVersion:   m.Version,
		FieldSources:   sources,
		FieldRank:      RankKey(avg, m.MovieID),
	})
	return doc
}

// FromDocument converts a stored Clover document back to an aggregate.
func FromDocument(doc *d.Document) (engine.MovieStats, error) {
	var m engine.MovieStats
	var err error
	num := func(field string) int64 {
		v, e := ToInt64(doc.Get(field))
		if e != nil && err == nil {
			err = fmt.Errorf("field %s: %w", field, e)
		}
		return v
	}
	m.MovieID = num(FieldMovie)
	m.Partition = int32(num(FieldPartition))
	m.Count = num(FieldCount)
	m.Version = num(FieldVersion)
	sum, e := ToFloat64(doc.Get(FieldSum))
	if e != nil && err == nil {
		err = fmt.Errorf("field %s: %w", FieldSum, e)
	}
	m.Sum = sum
	if src, ok := doc.Get(FieldSources).(map[string]interface{}); ok && len(src) > 0 {
		m.Sources = make(map[int32]int64, len(src))
		for k, v := range src {
			p, e := strconv.ParseInt(k, 10, 32)
			off, e2 := ToInt64(v)
			if (e != nil || e2 != nil) && err == nil {
				err = fmt.Errorf("field %s.%s: not a partition offset", FieldSources, k)
			}
			m.Sources[int32(p)] = off
		}
	}
	if err != nil {
		return engine.MovieStats{}, fmt.Errorf("corrupt document %v: %w", doc.Get(FieldID), err)
	}
	return m, nil
}

// ToInt64 converts a decoded msgpack integer of any width.
func ToInt64(v interface{}) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int8:
		return int64(n), nil
	case int16:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case int:
		return int64(n), nil
	case uint8:
		return int64(n), nil
	case uint16:
		return int64(n), nil
	case uint32:
		return int64(n), nil
	case uint64:
		if n > math.MaxInt64 {
			return 0, fmt.Errorf("integer %d out of range", n)
		}
		return int64(n), nil
	case uint:
		return int64(n), nil
	}
	return 0, fmt.Errorf("not an integer: %T", v)
}

// ToFloat64 converts a decoded msgpack number.
func ToFloat64(v interface{}) (float64, error) {
	switch f := v.(type) {
	case float64:
		return f, nil
	case float32:
		return float64(f), nil
	}
	n, err := ToInt64(v)
	return float64(n), err
}
