package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// errCorrupt marks a stored value this package cannot decode (written by
// something else, or by an incompatible version).
var errCorrupt = errors.New("corrupt stored document")

func formatInt(v int64) string { return strconv.FormatInt(v, 10) }

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
		p, perr := strconv.ParseInt(ps, 10, 32)
		o, oerr := strconv.ParseInt(os, 10, 64)
		if !ok || perr != nil || oerr != nil {
			return nil, fmt.Errorf("sources %q: %w", s, errCorrupt)
		}
		out[int32(p)] = o
	}
	return out, nil
}
