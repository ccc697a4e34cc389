package boltstore

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"

	"github.com/keepstate/keepstate/engine"
	d "github.com/ostafen/clover/v2/document"
)

// collection is the Clover collection holding one document per movie.
const collection = "movies"

// Document field names. Indexed names must not be prefixes of each other
// (Clover's index key prefixes would overlap).
const (
	fieldID        = d.ObjectIdField
	fieldMovie     = "movieId"
	fieldPartition = "partition"
	fieldCount     = "count"
	fieldSum       = "sum"
	fieldAvg       = "avg"
	fieldVersion   = "version"
	fieldSources   = "sources"
	fieldRank      = "rank" // indexed
)

// signBit flips int64 order into unsigned byte order.
const signBit = 1 << 63

// docID returns the Clover _id of a movie: a canonical 36-character UUID
// whose first 16 hex digits are the movie id (offset so that negative ids
// sort first), so ids sort like movie ids and map back to them.
func docID(movie int64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(movie)^signBit)
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
	return string(s[:])
}

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

// memberKey returns the key of movie in the members bucket: the partition,
// then the movie id, so that one partition's movies are one key range.
func memberKey(p int32, movie int64) []byte {
	k := binary.BigEndian.AppendUint32(make([]byte, 0, 12), uint32(p))
	return binary.BigEndian.AppendUint64(k, uint64(movie)^signBit)
}

// memberMovie returns the movie id of a members key.
func memberMovie(k []byte) int64 {
	return int64(binary.BigEndian.Uint64(k[4:12]) ^ signBit)
}

// rankKey returns the rank of (avg, movie): a 32-character lowercase hex
// string whose byte order is average descending, then movie id ascending.
func rankKey(avg float64, movie int64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], ^orderedFloat(avg))
	binary.BigEndian.PutUint64(b[8:], uint64(movie)^signBit)
	return hex.EncodeToString(b[:])
}

// toDocument converts a validated aggregate to its Clover document.
func toDocument(m engine.MovieStats) *d.Document {
	doc := d.NewDocument()
	sources := make(map[string]interface{}, len(m.Sources))
	for p, off := range m.Sources {
		sources[strconv.FormatInt(int64(p), 10)] = off
	}
	avg := m.Avg()
	doc.SetAll(map[string]interface{}{
		fieldID:        docID(m.MovieID),
		fieldMovie:     m.MovieID,
		fieldPartition: int64(m.Partition),
		fieldCount:     m.Count,
		fieldSum:       m.Sum,
		fieldAvg:       avg,
		fieldVersion:   m.Version,
		fieldSources:   sources,
		fieldRank:      rankKey(avg, m.MovieID),
	})
	return doc
}

// fromDocument converts a stored Clover document back to an aggregate.
func fromDocument(doc *d.Document) (engine.MovieStats, error) {
	var m engine.MovieStats
	var err error
	num := func(field string) int64 {
		v, e := toInt64(doc.Get(field))
		if e != nil && err == nil {
			err = fmt.Errorf("field %s: %w", field, e)
		}
		return v
	}
	m.MovieID = num(fieldMovie)
	m.Partition = int32(num(fieldPartition))
	m.Count = num(fieldCount)
	m.Version = num(fieldVersion)
	sum, e := toFloat64(doc.Get(fieldSum))
	if e != nil && err == nil {
		err = fmt.Errorf("field %s: %w", fieldSum, e)
	}
	m.Sum = sum
	if src, ok := doc.Get(fieldSources).(map[string]interface{}); ok && len(src) > 0 {
		m.Sources = make(map[int32]int64, len(src))
		for k, v := range src {
			p, e := strconv.ParseInt(k, 10, 32)
			off, e2 := toInt64(v)
			if (e != nil || e2 != nil) && err == nil {
				err = fmt.Errorf("field %s.%s: not a partition offset", fieldSources, k)
			}
			m.Sources[int32(p)] = off
		}
	}
	if err != nil {
		return engine.MovieStats{}, fmt.Errorf("corrupt document %v: %w", doc.Get(fieldID), err)
	}
	return m, nil
}

// toInt64 converts a decoded msgpack integer of any width.
func toInt64(v interface{}) (int64, error) {
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

// toFloat64 converts a decoded msgpack number.
func toFloat64(v interface{}) (float64, error) {
	switch f := v.(type) {
	case float64:
		return f, nil
	case float32:
		return float64(f), nil
	}
	n, err := toInt64(v)
	return float64(n), err
}
