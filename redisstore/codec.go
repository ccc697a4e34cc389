package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/keepstate/keepstate/engine"
)

// docFields are the hash fields read back into a MovieStats, in the order
// HMGET and the range script return them.
var docFields = []string{"id", "count", "sum", "partition", "version", "sources"}

// errCorrupt marks a stored value this package cannot decode (written by
// something else, or by an incompatible version).
var errCorrupt = errors.New("corrupt stored document")

func formatInt(v int64) string { return strconv.FormatInt(v, 10) }

// formatFloat formats f so that parsing it gives back exactly f.
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// encodeSources encodes sources as "p:o,p:o" sorted by partition.
func encodeSources(src map[int32]int64) string {
	if len(src) == 0 {
		return ""
	}
	parts := make([]int32, 0, len(src))
	for p := range src {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	var b []byte
	for i, p := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(p), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, src[p], 10)
	}
	return string(b)
}

func decodeSources(s string) (map[int32]int64, error) {
	if s == "" {
		return nil, nil
	}
	out := make(map[int32]int64, strings.Count(s, ",")+1)
	for item := range strings.SplitSeq(s, ",") {
		ps, os, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("sources %q: %w", s, errCorrupt)
		}
		p, err := strconv.ParseInt(ps, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("sources %q: %w", s, errCorrupt)
		}
		o, err := strconv.ParseInt(os, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("sources %q: %w", s, errCorrupt)
		}
		out[int32(p)] = o
	}
	return out, nil
}

// decodeDoc builds a MovieStats from the docFields values of one hash; ok is
// false when the hash does not exist (every value nil).
func decodeDoc(vals []any) (m engine.MovieStats, ok bool, err error) {
	if len(vals) != len(docFields) {
		return m, false, fmt.Errorf("%d fields, want %d: %w", len(vals), len(docFields), errCorrupt)
	}
	str := make([]string, len(vals))
	missing := 0
	for i, v := range vals {
		switch v := v.(type) {
		case nil:
			missing++
		case string:
			str[i] = v
		default:
			return m, false, fmt.Errorf("field %s has type %T: %w", docFields[i], v, errCorrupt)
		}
	}
	if missing == len(vals) {
		return m, false, nil
	}
	if missing > 1 || (missing == 1 && vals[5] != nil) {
		// Only sources may be absent (a document without sources).
		return m, false, fmt.Errorf("document with missing fields: %w", errCorrupt)
	}
	var errs [5]error
	m.MovieID, errs[0] = strconv.ParseInt(str[0], 10, 64)
	m.Count, errs[1] = strconv.ParseInt(str[1], 10, 64)
	m.Sum, errs[2] = strconv.ParseFloat(str[2], 64)
	var p int64
	p, errs[3] = strconv.ParseInt(str[3], 10, 32)
	m.Partition = int32(p)
	m.Version, errs[4] = strconv.ParseInt(str[4], 10, 64)
	for i, e := range errs {
		if e != nil {
			return m, false, fmt.Errorf("field %s: %w", docFields[i], errCorrupt)
		}
	}
	if m.Sources, err = decodeSources(str[5]); err != nil {
		return m, false, err
	}
	return m, true, nil
}
