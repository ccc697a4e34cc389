package web

import (
	"math"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/keepstate/keepstate/engine"
)

// Paging limits of GET /tables/{table} and GET /movies. A limit above
// MaxLimit is a 400, not clamped: a short page never passes for the whole.
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// maxEchoedInput bounds the quoted (escaped) bytes of bad input an error echoes.
const maxEchoedInput = 48

// quoteInput returns s quoted as by %q, cut (and followed by "...") so that
// the quoted form has at most maxEchoedInput bytes, however it escapes.
func quoteInput(s string) string {
	for n := min(len(s), maxEchoedInput); ; n-- {
		if q := strconv.Quote(s[:n]); len(q) <= maxEchoedInput || n == 0 {
			if n < len(s) {
				q += "..."
			}
			return q
		}
	}
}

// parseTableQuery parses the raw query string of GET /tables/{table} for
// a table of spec:
//
//	index  the declared index to query (required)
//	min    inclusive lower bound, parsed by the index kind
//	max    inclusive upper bound
//	eq     exact value (min = max = eq); excludes min and max
//	order  asc (default) or desc
//	limit  page size, 1 to MaxLimit (DefaultLimit)
//	after  the next cursor of the previous page
//
// An empty value counts as absent (so a form may send every field). Every
// error is a 400 naming the parameter. It returns the index's position and
// kind with the query.
func parseTableQuery(spec engine.TableSpec, rawQuery string) (engine.IndexQuery, int, engine.IndexKind, error) {
	q := engine.IndexQuery{Limit: DefaultLimit}
	params, err := parseParams(rawQuery)
	// get returns the parameter name ("" when absent), or "" once err is set.
	get := func(name string) (raw string) {
		if err == nil {
			raw, _, err = params.get(name)
		}
		return raw
	}
	index := get("index")
	switch {
	case err != nil:
		return q, 0, 0, err
	case len(spec.Indexes) == 0:
		return q, 0, 0, badRequest("parameter index: table %s declares no index to query", spec.Name)
	case index == "":
		return q, 0, 0, badRequest("parameter index: required, one of %s", indexNames(spec))
	}
	pos, ix, found := spec.Index(index)
	if !found {
		return q, 0, 0, badRequest("parameter index: table %s has no index %s (indexes: %s)",
			spec.Name, quoteInput(index), indexNames(spec))
	}
	q.Index = ix.Name
	bound := func(name string) (v engine.IndexValue, ok bool) {
		if raw := get(name); raw != "" {
			v, err = parseIndexValue(name, raw, ix.Kind)
			ok = err == nil
		}
		return v, ok
	}
	q.Min, q.HasMin = bound("min")
	q.Max, q.HasMax = bound("max")
	eq, hasEq := bound("eq")
	switch {
	case err != nil:
		return q, 0, 0, err
	case hasEq && (q.HasMin || q.HasMax):
		return q, 0, 0, badRequest("parameter eq: excludes min and max (eq=v is min=v&max=v)")
	case hasEq:
		q.Min, q.Max, q.HasMin, q.HasMax = eq, eq, true, true
	case q.HasMin && q.HasMax && valueLess(q.Max, q.Min, ix.Kind):
		return q, 0, 0, badRequest("parameters min and max: min is above max")
	}
	switch order := get("order"); {
	case err != nil:
		return q, 0, 0, err
	case order == "desc":
		q.Desc = true
	case order != "" && order != "asc":
		return q, 0, 0, badRequest("parameter order: %s is not asc or desc", quoteInput(order))
	}
	if raw := get("limit"); raw != "" {
		q.Limit, err = parseLimit(raw)
	}
	if raw := get("after"); raw != "" {
		cur, cerr := decodeTableCursor(spec.Name, q.Index, ix.Kind, raw)
		if cerr != nil {
			return q, 0, 0, badRequest("parameter after: not a cursor returned by this API for table %s and index %s "+
				"(use the \"next\" value as is)", spec.Name, q.Index)
		}
		q.After = &cur
	}
	if err != nil {
		return q, 0, 0, err
	}
	return q, pos, ix.Kind, nil
}

// queryParams are the parameters of a query string.
type queryParams url.Values

// parseParams parses a raw query string; bad percent-encoding is a 400.
func parseParams(rawQuery string) (queryParams, error) {
	params, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, badRequest("query string: not valid percent-encoded name=value pairs")
	}
	return queryParams(params), nil
}

// get returns the parameter name and whether it was given; twice is a 400.
func (p queryParams) get(name string) (string, bool, error) {
	if vs := p[name]; len(vs) > 1 {
		return "", false, badRequest("parameter %s: given %d times, want at most once", name, len(vs))
	}
	return url.Values(p).Get(name), len(p[name]) == 1, nil
}

// parseLimit parses the parameter limit: 1 to MaxLimit.
func parseLimit(raw string) (int, error) {
	n, err := strconv.Atoi(raw)
	switch {
	case err != nil:
		return 0, badRequest("parameter limit: %s is not an integer", quoteInput(raw))
	case n < 1 || n > MaxLimit:
		return 0, badRequest("parameter limit: %d is out of range, want 1 to %d", n, MaxLimit)
	}
	return n, nil
}

// indexNames lists the declared indexes of spec for error messages.
func indexNames(spec engine.TableSpec) string {
	names := make([]string, len(spec.Indexes))
	for i, ix := range spec.Indexes {
		names[i] = ix.Name
	}
	return strings.Join(names, ", ")
}

// parseIndexValue parses parameter name by kind: a finite number or a valid index string.
func parseIndexValue(name, raw string, kind engine.IndexKind) (engine.IndexValue, error) {
	if kind == engine.IndexNumber {
		v, err := strconv.ParseFloat(raw, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return engine.IndexValue{}, badRequest("parameter %s: %s is not a finite number", name, quoteInput(raw))
		}
		return engine.Num(v), nil
	}
	if !validIndexString(raw) {
		return engine.IndexValue{}, badRequest("parameter %s: want UTF-8 without NUL, at most %d bytes", name, engine.MaxIndexStringBytes)
	}
	return engine.Str(raw), nil
}

// validIndexString reports whether s may be a string index value.
func validIndexString(s string) bool {
	return len(s) <= engine.MaxIndexStringBytes && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// valueLess reports a < b for values of kind.
func valueLess(a, b engine.IndexValue, kind engine.IndexKind) bool {
	if kind == engine.IndexNumber {
		return a.Num < b.Num
	}
	return a.Str < b.Str
}

// formatIndexValue renders v as parseIndexValue reads it.
func formatIndexValue(v engine.IndexValue, kind engine.IndexKind) string {
	if kind == engine.IndexNumber {
		return strconv.FormatFloat(v.Num, 'g', -1, 64)
	}
	return v.Str
}

// tableQueryValues encodes q, a query on table, as a peer is asked it.
func tableQueryValues(table string, kind engine.IndexKind, q engine.IndexQuery) url.Values {
	v := url.Values{"index": {q.Index}, "limit": {strconv.Itoa(q.Limit)}}
	if q.HasMin {
		v.Set("min", formatIndexValue(q.Min, kind))
	}
	if q.HasMax {
		v.Set("max", formatIndexValue(q.Max, kind))
	}
	if q.Desc {
		v.Set("order", "desc")
	}
	if q.After != nil {
		v.Set("after", encodeTableCursor(table, q.Index, kind, *q.After))
	}
	return v
}
