package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

// ForwardedHeader marks a request routed from another instance; it is
// answered from the local store and never routed again.
const ForwardedHeader = "X-Keepstate-Forwarded"

// Router tells where a key's state lives when each instance holds only the
// partitions it owns (a local store such as clover). *engine.Engine
// implements it. Methods are called concurrently from request goroutines.
type Router interface {
	// Owner returns the API address (host:port) of the instance owning
	// movieID and whether that is this instance; an error wrapping
	// engine.ErrUnavailable while nobody owns it.
	Owner(ctx context.Context, movieID int64) (addr string, local bool, err error)
	// Peers returns the API addresses of the other instances.
	Peers(ctx context.Context) ([]string, error)
}

// forwarded reports whether the request came from another instance.
func forwarded(c echo.Context) bool { return c.Request().Header.Get(ForwardedHeader) != "" }

// peerGet sends GET http://addr+pathQuery to a peer and returns status and body.
func (s *Server) peerGet(ctx context.Context, addr, pathQuery string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+pathQuery, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set(ForwardedHeader, "1")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("instance %s: %v: %w", addr, err, engine.ErrUnavailable)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("instance %s: %v: %w", addr, err, engine.ErrUnavailable)
	}
	return resp.StatusCode, body, nil
}

// routeGet answers GET /movies/{id} from the owning instance when that is
// another one; handled is false when the local store should answer.
func (s *Server) routeGet(c echo.Context, ctx context.Context, id int64) (handled bool, err error) {
	if s.opts.Router == nil || forwarded(c) {
		return false, nil
	}
	addr, local, err := s.opts.Router.Owner(ctx, id)
	if err != nil {
		return true, fmt.Errorf("route movie %d: %w", id, err)
	}
	if local {
		return false, nil
	}
	code, body, err := s.peerGet(ctx, addr, fmt.Sprintf("/movies/%d", id))
	if err != nil {
		return true, err
	}
	return true, c.JSONBlob(code, body)
}

// gatherRange merges the local page with the pages of every peer for the
// same query: each instance answers for the partitions it owns, so the
// first q.Limit of the merged, sorted answers are the global page.
func (s *Server) gatherRange(c echo.Context, ctx context.Context, q engine.RangeQuery, local engine.Page) ([]movieJSON, *engine.Cursor, error) {
	all := make([]movieJSON, 0, len(local.Movies))
	for _, m := range local.Movies {
		all = append(all, toMovieJSON(m))
	}
	if s.opts.Router == nil || forwarded(c) {
		return all, local.Next, nil
	}
	peers, err := s.opts.Router.Peers(ctx)
	if err != nil {
		return nil, nil, err
	}
	more := local.Next != nil
	for _, p := range peers {
		code, body, err := s.peerGet(ctx, p, "/movies?"+c.Request().URL.RawQuery)
		if err != nil {
			return nil, nil, err
		}
		if code != http.StatusOK {
			return nil, nil, fmt.Errorf("instance %s answered %d: %s: %w", p, code, body, engine.ErrUnavailable)
		}
		var page moviesPage
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, nil, fmt.Errorf("instance %s: %w", p, err)
		}
		all = append(all, page.Movies...)
		more = more || page.Next != ""
	}
	cur := func(m movieJSON) engine.Cursor { return engine.Cursor{Avg: m.Rating, MovieID: m.MovieID} }
	sort.Slice(all, func(i, j int) bool { return cur(all[i]).Before(cur(all[j])) })
	if len(all) > q.Limit {
		all, more = all[:q.Limit], true
	}
	var next *engine.Cursor
	if more && len(all) > 0 {
		c := cur(all[len(all)-1])
		next = &c
	}
	return all, next, nil
}
