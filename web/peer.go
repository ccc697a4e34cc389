package web

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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

// ForwardedHeader marks a request routed from another instance. Its value
// is "t=<unix seconds>,s=<hex HMAC-SHA256>" where the HMAC, keyed with the
// shared peer secret, covers method, escaped path, raw query and the
// timestamp. A request carrying the header with a bad or expired signature
// is refused with 401; a valid one is answered from this instance's running
// partitions only and is never routed again.
const ForwardedHeader = "X-Keepstate-Forwarded"

// PartitionsHeader lists, on a forwarded range answer, the partitions the
// answering instance covered ("0,3,5"). Only peers read it.
const PartitionsHeader = "X-Keepstate-Partitions"

// forwardedMaxSkew is how far a forwarded request's timestamp may be off.
const forwardedMaxSkew = 30 * time.Second

// maxPeerBody bounds a peer's answer: a full page of MaxLimit documents
// may carry 1 kB keys, long index strings and the job's values.
const maxPeerBody = 16 << 20

// errNotForwardable answers a signed forwarded request for a key this
// instance does not run: it is never routed a second time.
var errNotForwardable = fmt.Errorf("partition not running on this instance: %w", engine.ErrUnavailable)

// peerAuth signs and checks forwarded requests with a shared secret.
type peerAuth struct{ secret []byte }

// newPeerAuth returns a signer for secret, or for a random secret (which no
// other instance knows, so nothing forwarded is accepted) when it is empty.
func newPeerAuth(secret []byte) peerAuth {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	return peerAuth{secret: append([]byte(nil), secret...)}
}

func (a peerAuth) mac(req *http.Request, ts int64) []byte {
	h := hmac.New(sha256.New, a.secret)
	u := req.URL
	h.Write([]byte(req.Method + "\n" + u.EscapedPath() + "\n" + u.RawQuery + "\n" + strconv.FormatInt(ts, 10)))
	return h.Sum(nil)
}

// sign sets ForwardedHeader on req.
func (a peerAuth) sign(req *http.Request, now time.Time) {
	ts := now.Unix()
	req.Header.Set(ForwardedHeader, "t="+strconv.FormatInt(ts, 10)+",s="+hex.EncodeToString(a.mac(req, ts)))
}

// forwarded reports whether req carries ForwardedHeader and whether its signature is valid.
func (a peerAuth) forwarded(req *http.Request, now time.Time) (present, valid bool) {
	v := req.Header.Get(ForwardedHeader)
	t, s, _ := strings.Cut(v, ",")
	t, okT := strings.CutPrefix(t, "t=")
	s, okS := strings.CutPrefix(s, "s=")
	if v == "" || len(v) > 128 || !okT || !okS {
		return v != "", false
	}
	ts, err := strconv.ParseInt(t, 10, 64)
	sig, herr := hex.DecodeString(s)
	if err != nil || herr != nil || len(sig) != sha256.Size {
		return true, false
	}
	if d := now.Sub(time.Unix(ts, 0)); d > forwardedMaxSkew || d < -forwardedMaxSkew {
		return true, false
	}
	return true, hmac.Equal(sig, a.mac(req, ts))
}

// SignForwarded sets ForwardedHeader on req as an instance sharing secret
// would, for tools and tests that ask one instance for its own part (see
// ForwardedHeader and PartitionsHeader).
func SignForwarded(req *http.Request, secret []byte) {
	peerAuth{secret: secret}.sign(req, time.Now())
}

// checkForwarded reports whether a peer forwarded the request; a bad signature is a 401.
func (s *Server) checkForwarded(c echo.Context) (bool, error) {
	present, valid := s.auth.forwarded(c.Request(), time.Now())
	if present && !valid {
		return false, &statusError{status: http.StatusUnauthorized,
			msg: ForwardedHeader + " is reserved for requests between keepstate instances and its signature is not valid"}
	}
	return present, nil
}

// tablePeerGet sends a signed GET of the escaped path rawPath (string keys
// may hold escaped slashes) to the peer at addr and returns status, headers
// and body (at most maxPeerBody). Every error wraps engine.ErrUnavailable.
func (s *Server) tablePeerGet(ctx context.Context, addr, rawPath string, query url.Values) (int, http.Header, []byte, error) {
	if err := engine.ValidPeerAddr(addr); err != nil {
		return 0, nil, nil, fmt.Errorf("instance %q: peer address: %w: %w", addr, err, engine.ErrUnavailable)
	}
	fail := func(err any) (int, http.Header, []byte, error) {
		return 0, nil, nil, fmt.Errorf("instance %s: %v: %w", addr, err, engine.ErrUnavailable)
	}
	path, err := url.PathUnescape(rawPath)
	if err != nil {
		return fail("path: " + err.Error())
	}
	u := url.URL{Scheme: "http", Host: addr, Path: path, RawPath: rawPath, RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fail(err)
	}
	s.auth.sign(req, time.Now())
	resp, err := s.client.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerBody+1))
	if err == nil && len(body) > maxPeerBody {
		err = fmt.Errorf("answer larger than %d bytes", maxPeerBody)
	}
	if err != nil {
		return fail(err)
	}
	return resp.StatusCode, resp.Header, body, nil
}

// decodeStrict parses one JSON value into v: no unknown field, no trailer.
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
