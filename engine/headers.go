package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
)

// Record header names written by the engine.
const (
	// HeaderSourcePartition and HeaderSourceOffset carry the input record's
	// position on repartition records.
	HeaderSourcePartition = "keepstate.src.partition"
	HeaderSourceOffset    = "keepstate.src.offset"
	// HeaderVersion and HeaderSources carry a document's processing metadata
	// on changelog records.
	HeaderVersion = "keepstate.version"
	HeaderSources = "keepstate.sources"
	// Dead-letter headers: why and where a record failed.
	HeaderDLQReason    = "keepstate.dlq.reason"
	HeaderDLQTopic     = "keepstate.dlq.topic"
	HeaderDLQPartition = "keepstate.dlq.partition"
	HeaderDLQOffset    = "keepstate.dlq.offset"
	// HeaderDLQTruncated ("true") and HeaderDLQOriginalSize mark a dead
	// letter whose value was cut to fit the producer's record limit.
	HeaderDLQTruncated    = "keepstate.dlq.truncated"
	HeaderDLQOriginalSize = "keepstate.dlq.original-size"
)

func header(k, v string) sarama.RecordHeader {
	return sarama.RecordHeader{Key: []byte(k), Value: []byte(v)}
}

// The names of the headers written for every record, converted once and
// shared by all records (sarama only reads them).
var (
	keySourcePartition = []byte(HeaderSourcePartition)
	keySourceOffset    = []byte(HeaderSourceOffset)
	keyVersion         = []byte(HeaderVersion)
	keySources         = []byte(HeaderSources)
)

// findHeaderBytes returns the value of header k, not copied.
func findHeaderBytes(hs []*sarama.RecordHeader, k string) ([]byte, bool) {
	for _, h := range hs {
		if h != nil && string(h.Key) == k {
			return h.Value, true
		}
	}
	return nil, false
}

// itoa returns the decimal text of v.
func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// parseDecimal parses b as a base-10 integer of at most bits bits, as
// strconv.ParseInt does, without allocating.
func parseDecimal(b []byte, bits uint) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0') // 19 digits cannot overflow a uint64
	}
	limit := uint64(1) << (bits - 1)
	if (!neg && u >= limit) || (neg && u > limit) {
		return 0, false
	}
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

// sourceOf returns the input position carried by a repartition record; ok is
// false when the headers are absent (records not written by keepstate).
func sourceOf(hs []*sarama.RecordHeader) (p int32, off int64, ok bool, err error) {
	ps, ok1 := findHeaderBytes(hs, HeaderSourcePartition)
	os, ok2 := findHeaderBytes(hs, HeaderSourceOffset)
	if !ok1 || !ok2 {
		return 0, 0, false, nil
	}
	pp, ok1 := parseDecimal(ps, 32)
	oo, ok2 := parseDecimal(os, 64)
	if !ok1 || !ok2 {
		return 0, 0, false, fmt.Errorf("bad source headers %q/%q: %w", ps, os, ErrInvalid)
	}
	return int32(pp), oo, true, nil
}

// appendSources appends sources to b as "p:o,p:o", sorted by partition.
func appendSources(b []byte, m map[int32]int64) []byte {
	var small [8]int32
	ps := small[:0]
	for p := range m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for i, p := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(p), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, m[p], 10)
	}
	return b
}

// decodeSources parses the output of appendSources.
func decodeSources(s string) (map[int32]int64, error) {
	m := map[int32]int64{}
	if s == "" {
		return m, nil
	}
	for _, part := range strings.Split(s, ",") {
		ps, os, found := strings.Cut(part, ":")
		p, err1 := strconv.ParseInt(ps, 10, 32)
		o, err2 := strconv.ParseInt(os, 10, 64)
		if !found || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("bad sources header %q: %w", s, ErrInvalid)
		}
		m[int32(p)] = o
	}
	return m, nil
}
