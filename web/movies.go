package web

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

// Paging limits of GET /movies. A limit above MaxLimit is refused with 400
// rather than silently clamped, so a client never mistakes a short page for
// the whole answer.
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// movieJSON is one movie as the API shows it.
type movieJSON struct {
	MovieID int64   `json:"movieId"`
	Rating  float64 `json:"rating"`
	Count   int64   `json:"count"`
}

// moviesPage is the body of GET /movies. Partial is set, with the
// partitions nobody answered for, when an instance owning some partitions
// did not answer (crashed, restoring, or rebalancing): the page is then
// correct for the other partitions only.
type moviesPage struct {
	Movies            []movieJSON `json:"movies"`
	Next              string      `json:"next"`
	Partial           bool        `json:"partial,omitempty"`
	MissingPartitions []int32     `json:"missingPartitions,omitempty"`
}

// maxEchoedInput bounds how much of a client's bad input an error message
// quotes: at most this many bytes of the quoted (escaped) form.
const maxEchoedInput = 48

// quoteInput returns s quoted as by %q, cut so that the quoted form has at
// most maxEchoedInput bytes (followed by "..." when cut), so that an error
// never echoes input of unbounded size, however it escapes.
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

func toMovieJSON(m engine.MovieStats) movieJSON {
	return movieJSON{MovieID: m.MovieID, Rating: m.Avg(), Count: m.Count}
}

// errNoQuerier is returned when the server has no store to query.
var errNoQuerier = fmt.Errorf("no store configured: %w", engine.ErrUnavailable)

// queryContext returns the request context bounded by QueryTimeout.
func (s *Server) queryContext(c echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request().Context(), s.opts.QueryTimeout)
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
	if s.opts.Querier == nil {
		return errNoQuerier
	}
	ctx, cancel := s.queryContext(c)
	defer cancel()
	if handled, err := s.routeGet(c, ctx, id); handled {
		return err
	}
	m, err := s.opts.Querier.Get(ctx, id)
	if errors.Is(err, engine.ErrNotFound) {
		return notFound("movie %d not found", id)
	}
	if err != nil {
		return fmt.Errorf("get movie %d: %w", id, err)
	}
	return c.JSON(http.StatusOK, toMovieJSON(m))
}

// parseMovieID parses the id of GET /movies/{id}; the 400 quotes at most
// maxEchoedInput bytes of it.
func parseMovieID(raw string) (int64, error) {
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, badRequest("parameter id: %s is not a 64-bit integer movie id", quoteInput(raw))
	}
	return id, nil
}

// rangeMovies answers GET /movies?minAvg=&maxAvg=&limit=&after=.
func (s *Server) rangeMovies(c echo.Context) error {
	q, err := parseRangeQuery(c)
	if err != nil {
		return err
	}
	if s.opts.Querier == nil {
		return errNoQuerier
	}
	ctx, cancel := s.queryContext(c)
	defer cancel()
	if s.opts.Router == nil {
		page, err := s.opts.Querier.Range(ctx, q)
		if err != nil {
			return fmt.Errorf("range movies [%v, %v]: %w", q.MinAvg, q.MaxAvg, err)
		}
		return c.JSON(http.StatusOK, pageJSON(page))
	}
	fwd, err := s.checkForwarded(c)
	if err != nil {
		return err
	}
	if fwd {
		// A peer asks for this instance's part of the answer.
		page, covered, err := s.opts.Router.RangeLocal(ctx, q)
		if err != nil {
			return fmt.Errorf("range movies [%v, %v]: %w", q.MinAvg, q.MaxAvg, err)
		}
		c.Response().Header().Set(PartitionsHeader, formatPartitions(covered))
		return c.JSON(http.StatusOK, pageJSON(page))
	}
	res, err := s.gatherRange(ctx, q)
	if err != nil {
		return fmt.Errorf("range movies [%v, %v]: %w", q.MinAvg, q.MaxAvg, err)
	}
	out := moviesPage{Movies: res.movies, Partial: len(res.missing) > 0, MissingPartitions: res.missing}
	if out.Movies == nil {
		out.Movies = []movieJSON{}
	}
	if res.next != nil {
		out.Next = encodeCursor(*res.next)
	}
	return c.JSON(http.StatusOK, out)
}

// pageJSON renders a store page.
func pageJSON(p engine.Page) moviesPage {
	out := moviesPage{Movies: make([]movieJSON, 0, len(p.Movies))}
	for _, m := range p.Movies {
		out.Movies = append(out.Movies, toMovieJSON(m))
	}
	if p.Next != nil {
		out.Next = encodeCursor(*p.Next)
	}
	return out
}

// parseRangeQuery reads and checks the query parameters of GET /movies.
// Every error is a 400 naming the parameter.
func parseRangeQuery(c echo.Context) (engine.RangeQuery, error) {
	return parseRangeParams(c.Request().URL.RawQuery)
}

// parseRangeParams parses the raw query string of GET /movies. A query
// string that is not valid percent-encoding is a 400, never ignored.
func parseRangeParams(rawQuery string) (engine.RangeQuery, error) {
	q := engine.RangeQuery{MinAvg: -math.MaxFloat64, MaxAvg: math.Inf(1), Limit: DefaultLimit}
	params, perr := url.ParseQuery(rawQuery)
	if perr != nil {
		return q, badRequest("query string: not valid percent-encoded name=value pairs")
	}
	single := func(name string) (string, bool, error) {
		vs, ok := params[name]
		if !ok {
			return "", false, nil
		}
		if len(vs) > 1 {
			return "", false, badRequest("parameter %s: given %d times, want at most once", name, len(vs))
		}
		return vs[0], true, nil
	}
	bound := func(name string, dst *float64) error {
		raw, ok, err := single(name)
		if err != nil || !ok {
			return err
		}
		v, perr := strconv.ParseFloat(raw, 64)
		if perr != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return badRequest("parameter %s: %s is not a finite number", name, quoteInput(raw))
		}
		*dst = v
		return nil
	}
	if err := bound("minAvg", &q.MinAvg); err != nil {
		return q, err
	}
	if err := bound("maxAvg", &q.MaxAvg); err != nil {
		return q, err
	}
	if q.MinAvg > q.MaxAvg {
		return q, badRequest("parameters minAvg and maxAvg: minAvg %v is above maxAvg %v", q.MinAvg, q.MaxAvg)
	}

	raw, ok, err := single("limit")
	if err != nil {
		return q, err
	}
	if ok {
		n, perr := strconv.Atoi(raw)
		switch {
		case perr != nil:
			return q, badRequest("parameter limit: %s is not an integer", quoteInput(raw))
		case n < 1 || n > MaxLimit:
			return q, badRequest("parameter limit: %d is out of range, want 1 to %d", n, MaxLimit)
		}
		q.Limit = n
	}

	raw, ok, err = single("after")
	if err != nil {
		return q, err
	}
	if ok && raw != "" {
		cur, cerr := decodeCursor(raw)
		if cerr != nil {
			return q, badRequest("parameter after: not a cursor returned by this API (use the \"next\" value as is)")
		}
		q.After = &cur
	}
	return q, nil
}
