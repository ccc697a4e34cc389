package redisstore

import (
	"math"
	"strconv"
	"strings"
)

// keys builds the key names of one store (see the package doc).
type keys struct{ prefix string }

func (k keys) moviePrefix() string { return k.prefix + "movie:" }

func (k keys) movie(id int64) string { return k.moviePrefix() + strconv.FormatInt(id, 10) }

func (k keys) byAvg() string { return k.prefix + "by-avg" }

func (k keys) stream() string { return k.prefix + "rating-averages-stream" }

func (k keys) partitionPrefix() string { return k.prefix + "partition:" }

func (k keys) partition(p int32, what string) string {
	return k.partitionPrefix() + strconv.FormatInt(int64(p), 10) + ":" + what
}

func (k keys) members(p int32) string    { return k.partition(p, "members") }
func (k keys) checkpoint(p int32) string { return k.partition(p, "checkpoint") }
func (k keys) epoch(p int32) string      { return k.partition(p, "epoch") }
func (k keys) batch(p int32) string      { return k.partition(p, "batch") }

// isEpoch reports whether key is a partition's epoch key, of the movie
// layout or of a table (which Reset keeps too).
func (k keys) isEpoch(key string) bool {
	return (strings.HasPrefix(key, k.partitionPrefix()) && strings.HasSuffix(key, ":epoch")) || k.isTableEpoch(key)
}

// pattern is a SCAN MATCH pattern for every key of the store.
func (k keys) pattern() string {
	var b strings.Builder
	for _, r := range k.prefix {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('*')
	return b.String()
}

const hexDigits = "0123456789abcdef"

func appendHex64(b []byte, v uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[(v>>uint(shift))&0xf])
	}
	return b
}

// avgKey encodes avg as 16 hex digits whose lexicographic order is the
// descending numeric order (-0 is treated as 0).
func avgKey(avg float64) []byte {
	if avg == 0 {
		avg = 0 // folds -0 into +0
	}
	bits := math.Float64bits(avg)
	if bits>>63 == 1 {
		bits = ^bits // negative: larger magnitude sorts lower
	} else {
		bits |= 1 << 63
	}
	// bits now increases with avg; invert it for descending order.
	return appendHex64(make([]byte, 0, 48), ^bits)
}

// idKey appends id as 16 hex digits whose lexicographic order is the
// ascending numeric order.
func idKey(b []byte, id int64) []byte {
	return appendHex64(b, uint64(id)^(1<<63))
}

// rankPrefixLen is the fixed width of the ordered part of a rank.
const rankPrefixLen = 32

// rank is the by-avg member of a movie: avgKey, idKey, ":" and the decimal
// id, which the range script reads from position rankPrefixLen+2 on.
func rank(avg float64, id int64) string {
	b := idKey(avgKey(avg), id)
	b = append(b, ':')
	return string(strconv.AppendInt(b, id, 10))
}

// lexFrom is the inclusive ZRANGEBYLEX bound where averages <= max begin.
func lexFrom(max float64) string { return "[" + string(avgKey(max)) }

// lexTo is the inclusive ZRANGEBYLEX bound where averages >= min end:
// 0xff sorts after every hex digit of the id part.
func lexTo(min float64) string { return "[" + string(avgKey(min)) + "\xff" }

// lexAfter is the exclusive bound of every rank sorting after (avg, id).
func lexAfter(avg float64, id int64) string {
	return "(" + string(idKey(avgKey(avg), id)) + "\xff"
}
