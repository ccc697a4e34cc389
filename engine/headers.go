package engine

import (
	"fmt"
	"sort"
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

func findHeader(hs []*sarama.RecordHeader, k string) (string, bool) {
	for _, h := range hs {
		if h != nil && string(h.Key) == k {
			return string(h.Value), true
		}
	}
	return "", false
}

// sourceOf returns the input position carried by a repartition record; ok is
// false when the headers are absent (records not written by keepstate).
func sourceOf(hs []*sarama.RecordHeader) (p int32, off int64, ok bool, err error) {
	ps, ok1 := findHeader(hs, HeaderSourcePartition)
	os, ok2 := findHeader(hs, HeaderSourceOffset)
	if !ok1 || !ok2 {
		return 0, 0, false, nil
	}
	pp, err1 := strconv.ParseInt(ps, 10, 32)
	oo, err2 := strconv.ParseInt(os, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false, fmt.Errorf("bad source headers %q/%q: %w", ps, os, ErrInvalid)
	}
	return int32(pp), oo, true, nil
}

// encodeSources renders sources as "p:o,p:o" sorted by partition.
func encodeSources(m map[int32]int64) string {
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(p), 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(m[p], 10))
	}
	return b.String()
}

// decodeSources parses the output of encodeSources.
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
