package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

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

// maxPeerBody bounds a peer's answer: a full page of MaxLimit documents
// may carry 1 kB keys, long index strings and the job's values.
const maxPeerBody = 16 << 20

// tablePeerGet sends a signed GET of the escaped path rawPath (which may
// hold escaped slashes: string keys) and query to the peer at addr, and
// returns status, headers and a body of at most maxPeerBody bytes. Every
// error wraps engine.ErrUnavailable.
func (s *Server) tablePeerGet(ctx context.Context, addr, rawPath string, query url.Values) (int, http.Header, []byte, error) {
	if err := engine.ValidPeerAddr(addr); err != nil {
		return 0, nil, nil, fmt.Errorf("instance %q: peer address: %w: %w", addr, err, engine.ErrUnavailable)
	}
	path, err := url.PathUnescape(rawPath)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("instance %s: path: %w: %w", addr, err, engine.ErrUnavailable)
	}
	u := url.URL{Scheme: "http", Host: addr, Path: path, RawPath: rawPath, RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("instance %s: %w: %w", addr, err, engine.ErrUnavailable)
	}
	s.auth.sign(req, time.Now())
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("instance %s: %v: %w", addr, err, engine.ErrUnavailable)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerBody+1))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("instance %s: %v: %w", addr, err, engine.ErrUnavailable)
	}
	if len(body) > maxPeerBody {
		return 0, nil, nil, fmt.Errorf("instance %s: answer larger than %d bytes: %w", addr, maxPeerBody, engine.ErrUnavailable)
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
