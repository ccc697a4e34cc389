package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

// maxPeerBody bounds a peer's answer: a full page of MaxLimit movies is
// about 60 kB.
const maxPeerBody = 1 << 20

// Router tells where a key's state lives when each instance holds only the
// partitions it owns (a local store such as clover). *engine.Engine
// implements it. Methods are called concurrently from request goroutines
// and must return by the ctx deadline.
type Router interface {
	// Owner returns where movieID is answered: local=true when its
	// partition is RUNNING here, else the bare host:port of the owner; an
	// error wrapping engine.ErrUnavailable while nobody runs it.
	Owner(ctx context.Context, movieID int64) (addr string, local bool, err error)
	// Membership returns which instance owns each partition.
	Membership(ctx context.Context) (engine.Membership, error)
	// RangeLocal answers q for the partitions RUNNING here and returns
	// the partitions it covered.
	RangeLocal(ctx context.Context, q engine.RangeQuery) (engine.Page, []int32, error)
}

// errNotForwardable answers a signed forwarded request for a key this
// instance does not run: it is never routed a second time.
var errNotForwardable = fmt.Errorf("partition not running on this instance: %w", engine.ErrUnavailable)

// checkForwarded reports whether the request was forwarded by a peer; a
// ForwardedHeader without a valid signature is a 401.
func (s *Server) checkForwarded(c echo.Context) (bool, error) {
	present, valid := s.auth.forwarded(c.Request(), time.Now())
	if present && !valid {
		return false, &statusError{status: http.StatusUnauthorized,
			msg: ForwardedHeader + " is reserved for requests between keepstate instances and its signature is not valid"}
	}
	return present, nil
}

// peerURL builds http://addr/path?query with net/url. addr must already be
// a validated bare host:port (engine.ValidPeerAddr); it is checked again
// so that nothing else ever reaches the HTTP client.
func peerURL(addr, path string, query url.Values) (string, error) {
	if err := engine.ValidPeerAddr(addr); err != nil {
		return "", fmt.Errorf("peer address: %w", err)
	}
	u := url.URL{Scheme: "http", Host: addr, Path: path, RawQuery: query.Encode()}
	return u.String(), nil
}

// peerGet sends a signed GET to a peer and returns status, headers and body.
func (s *Server) peerGet(ctx context.Context, addr, path string, query url.Values) (int, http.Header, []byte, error) {
	target, err := peerURL(addr, path, query)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("instance %q: %w: %w", addr, err, engine.ErrUnavailable)
	}
	return s.signedGet(ctx, addr, target, maxPeerBody)
}

// signedGet sends a signed GET of target (on the peer at addr, already
// validated) and returns status, headers and a body of at most limit
// bytes. Every error wraps engine.ErrUnavailable.
func (s *Server) signedGet(ctx context.Context, addr, target string, limit int) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("instance %s: %w: %w", addr, err, engine.ErrUnavailable)
	}
	s.auth.sign(req, time.Now())
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("instance %s: %v: %w", addr, err, engine.ErrUnavailable)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("instance %s: %v: %w", addr, err, engine.ErrUnavailable)
	}
	if len(body) > limit {
		return 0, nil, nil, fmt.Errorf("instance %s: answer larger than %d bytes: %w", addr, limit, engine.ErrUnavailable)
	}
	return resp.StatusCode, resp.Header, body, nil
}

// decodeStrict parses one JSON value into v, refusing unknown fields and
// trailing data.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// validMovie checks a movie a peer sent.
func validMovie(m movieJSON) bool {
	return m.Count > 0 && !math.IsNaN(m.Rating) && !math.IsInf(m.Rating, 0)
}

// routeGet answers GET /movies/{id} from the instance where the movie's
// partition is RUNNING when that is another one; handled is false when the
// local store should answer. A peer's answer is checked and re-encoded,
// never passed through.
func (s *Server) routeGet(c echo.Context, ctx context.Context, id int64) (handled bool, err error) {
	if s.opts.Router == nil {
		return false, nil
	}
	fwd, err := s.checkForwarded(c)
	if err != nil {
		return true, err
	}
	addr, local, err := s.opts.Router.Owner(ctx, id)
	if err != nil {
		return true, fmt.Errorf("route movie %d: %w", id, err)
	}
	if local {
		return false, nil
	}
	if fwd {
		return true, fmt.Errorf("movie %d: %w", id, errNotForwardable)
	}
	code, _, body, err := s.peerGet(ctx, addr, "/movies/"+strconv.FormatInt(id, 10), nil)
	if err != nil {
		return true, err
	}
	switch code {
	case http.StatusOK:
		var m movieJSON
		if err := decodeStrict(body, &m); err != nil || m.MovieID != id || !validMovie(m) {
			return true, fmt.Errorf("instance %s: invalid answer for movie %d: %w", addr, id, engine.ErrUnavailable)
		}
		return true, c.JSON(http.StatusOK, m)
	case http.StatusNotFound:
		return true, notFound("movie %d not found", id)
	default:
		return true, fmt.Errorf("instance %s answered %d for movie %d: %w", addr, code, id, engine.ErrUnavailable)
	}
}

// rangeQueryValues encodes q as the query string of GET /movies.
func rangeQueryValues(q engine.RangeQuery) url.Values {
	v := url.Values{}
	if q.MinAvg != -math.MaxFloat64 {
		v.Set("minAvg", strconv.FormatFloat(q.MinAvg, 'g', -1, 64))
	}
	if !math.IsInf(q.MaxAvg, 1) {
		v.Set("maxAvg", strconv.FormatFloat(q.MaxAvg, 'g', -1, 64))
	}
	v.Set("limit", strconv.Itoa(q.Limit))
	if q.After != nil {
		v.Set("after", encodeCursor(*q.After))
	}
	return v
}

// parsePartitions reads PartitionsHeader: distinct partitions in [0, n).
func parsePartitions(h string, n int32) ([]int32, bool) {
	if h == "" {
		return nil, true
	}
	parts := strings.Split(h, ",")
	if len(parts) > int(n) {
		return nil, false
	}
	seen := map[int32]bool{}
	out := make([]int32, 0, len(parts))
	for _, p := range parts {
		v, err := strconv.ParseInt(p, 10, 32)
		if err != nil || v < 0 || int32(v) >= n || seen[int32(v)] {
			return nil, false
		}
		seen[int32(v)] = true
		out = append(out, int32(v))
	}
	return out, true
}

// formatPartitions renders partitions for PartitionsHeader.
func formatPartitions(ps []int32) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

// rangePeer asks one peer for q and checks its answer: a strict JSON page
// of at most q.Limit valid movies, each inside the query and in a
// partition the peer says it covered.
func (s *Server) rangePeer(ctx context.Context, addr string, q engine.RangeQuery, n int32) (peerPage[movieJSON], error) {
	code, hdr, body, err := s.peerGet(ctx, addr, "/movies", rangeQueryValues(q))
	if err != nil {
		return peerPage[movieJSON]{}, err
	}
	if code != http.StatusOK {
		return peerPage[movieJSON]{}, fmt.Errorf("instance %s answered %d: %w", addr, code, engine.ErrUnavailable)
	}
	covered, ok := parsePartitions(hdr.Get(PartitionsHeader), n)
	if !ok {
		return peerPage[movieJSON]{}, fmt.Errorf("instance %s: invalid %s header: %w", addr, PartitionsHeader, engine.ErrUnavailable)
	}
	var page moviesPage
	if err := decodeStrict(body, &page); err != nil || len(page.Movies) > q.Limit {
		return peerPage[movieJSON]{}, fmt.Errorf("instance %s: invalid range answer: %w", addr, engine.ErrUnavailable)
	}
	in := map[int32]bool{}
	for _, p := range covered {
		in[p] = true
	}
	for _, m := range page.Movies {
		cur := engine.Cursor{Avg: m.Rating, MovieID: m.MovieID}
		if !validMovie(m) || m.Rating < q.MinAvg || m.Rating > q.MaxAvg ||
			(q.After != nil && !q.After.Before(cur)) || !in[engine.PartitionFor(engine.Int64Keys.Append(nil, m.MovieID), n)] {
			return peerPage[movieJSON]{}, fmt.Errorf("instance %s: range answer holds movie %d outside the query or its partitions: %w", addr, m.MovieID, engine.ErrUnavailable)
		}
	}
	return peerPage[movieJSON]{items: page.Movies, more: page.Next != "", covered: covered}, nil
}

// rangeResult is a range page merged across instances.
type rangeResult struct {
	movies  []movieJSON
	next    *engine.Cursor
	missing []int32 // partitions no live instance answered for
}

// gatherRange merges this instance's range page with the pages of the
// instances owning the other partitions (see gather): an instance that
// does not answer costs its partitions, reported missing.
func (s *Server) gatherRange(ctx context.Context, q engine.RangeQuery) (rangeResult, error) {
	local, covered, err := s.opts.Router.RangeLocal(ctx, q)
	if err != nil {
		return rangeResult{}, err
	}
	mem, err := s.opts.Router.Membership(ctx)
	if err != nil {
		return rangeResult{}, err
	}
	mine := make([]movieJSON, 0, len(local.Movies))
	for _, m := range local.Movies {
		mine = append(mine, toMovieJSON(m))
	}
	cur := func(m movieJSON) engine.Cursor { return engine.Cursor{Avg: m.Rating, MovieID: m.MovieID} }
	g, err := gather(ctx, scatter[movieJSON]{
		mem:   mem,
		local: peerPage[movieJSON]{items: mine, more: local.Next != nil, covered: covered},
		ask: func(ctx context.Context, addr string) (peerPage[movieJSON], error) {
			return s.rangePeer(ctx, addr, q, mem.Partitions)
		},
		partition: func(m movieJSON) int32 {
			return engine.PartitionFor(engine.Int64Keys.Append(nil, m.MovieID), mem.Partitions)
		},
		less:  func(a, b movieJSON) bool { return cur(a).Before(cur(b)) },
		limit: q.Limit,
		warn: func(addr string, err error) {
			s.log.Warn("range query: instance did not answer, its partitions are reported missing", "peer", addr, "err", err)
		},
	})
	if err != nil {
		return rangeResult{}, err
	}
	res := rangeResult{movies: g.items, missing: g.missing}
	if g.more && len(g.items) > 0 {
		c := cur(g.items[len(g.items)-1])
		res.next = &c
	}
	return res, nil
}
