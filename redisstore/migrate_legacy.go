package redisstore

import (
	"fmt"
	"strconv"
	"strings"
)

// The movie layout as the migration (migrate.go) reads it.

// legacyKeys are the key names of the movie layout (see doc.go).
type legacyKeys struct{ prefix string }

func (k legacyKeys) movies() string { return k.prefix + "movie:" }
func (k legacyKeys) byAvg() string  { return k.prefix + "by-avg" }
func (k legacyKeys) parts() string  { return k.prefix + "partition:" }
func (k legacyKeys) partition(p int32, what string) string {
	return k.parts() + strconv.FormatInt(int64(p), 10) + ":" + what
}

// partitionOf returns the partition of a movie layout partition key
// ("<prefix>partition:<p>:<what>").
func (k legacyKeys) partitionOf(key string) (int32, bool) {
	rest, ok := strings.CutPrefix(key, k.parts())
	if !ok {
		return 0, false
	}
	ps, what, ok := strings.Cut(rest, ":")
	switch what {
	case "members", "checkpoint", "epoch", "batch":
	default:
		return 0, false
	}
	p, err := strconv.ParseInt(ps, 10, 32)
	return int32(p), ok && err == nil
}

// legacyFields are the movie hash fields the migration reads, in order.
var legacyFields = []string{"id", "count", "sum", "partition", "version", "sources"}

// legacyMovie is a movie hash of the movie layout, with the values the
// table document keeps as strings as they were stored.
type legacyMovie struct {
	id, count int64
	sum       float64
	partition int32
	version   string
	sources   string
}

// decodeLegacy parses the legacyFields of a movie hash; ok is false when
// the hash does not exist.
func decodeLegacy(vals []any) (mv legacyMovie, ok bool, err error) {
	str := make([]string, len(legacyFields))
	found := false
	for i, v := range vals {
		if s, isStr := v.(string); isStr {
			str[i], found = s, true
		} else if v != nil {
			return mv, false, fmt.Errorf("field %s has type %T: %w", legacyFields[i], v, errCorrupt)
		}
	}
	if !found {
		return mv, false, nil
	}
	var errs [5]error
	mv.id, errs[0] = strconv.ParseInt(str[0], 10, 64)
	mv.count, errs[1] = strconv.ParseInt(str[1], 10, 64)
	mv.sum, errs[2] = strconv.ParseFloat(str[2], 64)
	var p int64
	p, errs[3] = strconv.ParseInt(str[3], 10, 32)
	mv.partition = int32(p)
	_, errs[4] = strconv.ParseInt(str[4], 10, 64)
	for i, e := range errs {
		if e != nil {
			return mv, false, fmt.Errorf("field %s %q: %w", legacyFields[i], str[i], errCorrupt)
		}
	}
	src, err := decodeSources(str[5])
	if err != nil {
		return mv, false, err
	}
	mv.version, mv.sources = str[4], encodeSources(src)
	return mv, true, nil
}
