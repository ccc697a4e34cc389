package web

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
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

// moviesPage is the body of GET /movies.
type moviesPage struct {
	Movies []movieJSON `json:"movies"`
	Next   string      `json:"next"`
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
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return badRequest("parameter id: %q is not a 64-bit integer movie id", raw)
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
	page, err := s.opts.Querier.Range(ctx, q)
	if err != nil {
		return fmt.Errorf("range movies [%v, %v]: %w", q.MinAvg, q.MaxAvg, err)
	}
	movies, next, err := s.gatherRange(c, ctx, q, page)
	if err != nil {
		return fmt.Errorf("range movies on other instances: %w", err)
	}
	out := moviesPage{Movies: movies}
	if next != nil {
		out.Next = encodeCursor(*next)
	}
	return c.JSON(http.StatusOK, out)
}

// parseRangeQuery reads and checks the query parameters of GET /movies.
// Every error is a 400 naming the parameter.
func parseRangeQuery(c echo.Context) (engine.RangeQuery, error) {
	q := engine.RangeQuery{MinAvg: -math.MaxFloat64, MaxAvg: math.Inf(1), Limit: DefaultLimit}
	params := c.QueryParams()
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
			return badRequest("parameter %s: %q is not a finite number", name, raw)
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
			return q, badRequest("parameter limit: %q is not an integer", raw)
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
