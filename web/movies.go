package web

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// GET /movies/{id} and GET /movies are a view of the movie job's table
// (movies.Spec, also at /tables/movies): routed, merged and failing as the
// table routes, with the movie API's parameters, JSON and cursors.

// movieJSON is one movie as the API shows it.
type movieJSON struct {
	MovieID int64   `json:"movieId"`
	Rating  float64 `json:"rating"`
	Count   int64   `json:"count"`
	// Stale is set on an answer from a standby copy (see findDoc).
	Stale *staleJSON `json:"stale,omitempty"`
}

// moviesPage is the body of GET /movies. Partial is set, with the missing
// partitions, when an owner did not answer (crashed, restoring,
// rebalancing): the page is right for the other partitions only.
type moviesPage struct {
	Movies            []movieJSON `json:"movies"`
	Next              string      `json:"next"`
	Partial           bool        `json:"partial,omitempty"`
	MissingPartitions []int32     `json:"missingPartitions,omitempty"`
	// StalePartitions were answered from standby copies.
	StalePartitions []int32 `json:"stalePartitions,omitempty"`
}

// errNoMovies is returned when the server serves no movie table.
var errNoMovies = fmt.Errorf("no movie table: %w", engine.ErrUnavailable)

// errBadMovie marks a movie document whose value is not a count and sum.
var errBadMovie = errors.New("invalid movie document")

// isMovieTable reports whether t is the movie job's: movies.Spec, int64 keys.
func isMovieTable(t Table, spec engine.TableSpec) bool {
	want := movies.Spec
	return spec.Name == want.Name && spec.TiesAscending == want.TiesAscending &&
		len(spec.Indexes) == 1 && spec.Indexes[0] == want.Indexes[0] && t.KeyKind() == "int64"
}

// movieTable returns the movie job's table, or errNoMovies.
func (s *Server) movieTable() (Table, engine.TableSpec, error) {
	t, spec, err := s.table(movies.Spec.Name)
	if err != nil || !isMovieTable(t, spec) {
		return nil, engine.TableSpec{}, errNoMovies
	}
	return t, spec, nil
}

// movieID reads a movie key (8 bytes big-endian); any other key reads as 0.
func movieID(key []byte) int64 {
	if len(key) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(key))
}

// movieOf returns the movie of a document of the movie table (id from the
// key, rating from the avg index, count from the value), or errBadMovie for
// one without ratings or whose average is not a finite number.
func movieOf(it tableItem) (movieJSON, error) {
	var v struct {
		Count *int64 `json:"count"`
	}
	if len(it.cur.Key) != 8 || len(it.doc.Index.vals) != 1 || json.Unmarshal(it.doc.Value, &v) != nil || v.Count == nil {
		return movieJSON{}, errBadMovie
	}
	m := movieJSON{MovieID: movieID(it.cur.Key), Rating: it.doc.Index.vals[0].Num, Count: *v.Count}
	if m.Count <= 0 || math.IsNaN(m.Rating) || math.IsInf(m.Rating, 0) {
		return movieJSON{}, errBadMovie
	}
	return m, nil
}

// getMovie answers GET /movies/{id}.
func (s *Server) getMovie(c echo.Context) error {
	raw := c.Param("id")
	if strings.Contains(raw, "/") {
		// echo lets a trailing parameter swallow further segments.
		return echo.ErrNotFound
	}
	id, err := parseMovieID(raw)
	if err != nil {
		return err
	}
	t, spec, err := s.movieTable()
	if err != nil {
		return err
	}
	it, err := s.findDoc(c, t, spec, movies.Key(id))
	if errors.Is(err, engine.ErrNotFound) {
		return notFound("movie %d not found", id)
	}
	if err != nil {
		return fmt.Errorf("get movie %d: %w", id, err)
	}
	m, err := movieOf(it)
	if err != nil {
		return fmt.Errorf("movie %d: %w: %w", id, err, engine.ErrUnavailable)
	}
	m.Stale = it.doc.Stale
	setStaleHeaders(c, m.Stale)
	return c.JSON(http.StatusOK, m)
}

// parseMovieID parses the id of GET /movies/{id}.
func parseMovieID(raw string) (int64, error) {
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, badRequest("parameter id: %s is not a 64-bit integer movie id", quoteInput(raw))
	}
	return id, nil
}

// rangeMovies answers GET /movies?minAvg=&maxAvg=&limit=&after=.
func (s *Server) rangeMovies(c echo.Context) error {
	q, err := parseRangeParams(c.Request().URL.RawQuery)
	if err != nil {
		return err
	}
	t, spec, err := s.movieTable()
	if err != nil {
		return err
	}
	res, err := s.runQuery(c, tableQuery{t: t, spec: spec, pos: 0, kind: engine.IndexNumber, q: q})
	if err != nil {
		return fmt.Errorf("range movies: %w", err)
	}
	out := moviesPage{Movies: make([]movieJSON, 0, len(res.items)), Partial: len(res.missing) > 0, MissingPartitions: res.missing,
		StalePartitions: res.stale}
	for _, it := range res.items {
		m, err := movieOf(it)
		if err != nil {
			return fmt.Errorf("range movies: %w: %w", err, engine.ErrUnavailable)
		}
		out.Movies = append(out.Movies, m)
	}
	if res.next != nil {
		out.Next = encodeCursor(*res.next)
	}
	return c.JSON(http.StatusOK, out)
}

// parseRangeParams parses the raw query string of GET /movies into a
// query of the movie table's avg index, in descending order:
//
//	minAvg, maxAvg  inclusive bounds of the average (finite numbers)
//	limit           page size, 1 to MaxLimit (DefaultLimit)
//	after           the next cursor of the previous page (empty: none)
//
// Others are ignored. Unlike on GET /tables/{table}, an empty bound or
// limit is a 400 (naming the parameter, as every error), not absent.
func parseRangeParams(rawQuery string) (engine.IndexQuery, error) {
	q := engine.IndexQuery{Index: movies.Spec.Indexes[0].Name, Desc: true, Limit: DefaultLimit}
	params, err := parseParams(rawQuery)
	if err != nil {
		return q, err
	}
	for _, b := range []struct {
		name string
		dst  *engine.IndexValue
		has  *bool
	}{{"minAvg", &q.Min, &q.HasMin}, {"maxAvg", &q.Max, &q.HasMax}} {
		raw, ok, err := params.get(b.name)
		if err == nil && ok {
			*b.dst, err = parseIndexValue(b.name, raw, engine.IndexNumber)
			*b.has = err == nil
		}
		if err != nil {
			return q, err
		}
	}
	if q.HasMin && q.HasMax && q.Min.Num > q.Max.Num {
		return q, badRequest("parameters minAvg and maxAvg: minAvg %v is above maxAvg %v", q.Min.Num, q.Max.Num)
	}
	raw, ok, err := params.get("limit")
	if err == nil && ok {
		q.Limit, err = parseLimit(raw)
	}
	if err != nil {
		return q, err
	}
	if raw, _, err = params.get("after"); err != nil || raw == "" {
		return q, err
	}
	cur, err := decodeCursor(raw)
	if err != nil {
		return q, badRequest("parameter after: not a cursor returned by this API (use the \"next\" value as is)")
	}
	q.After = &cur
	return q, nil
}
