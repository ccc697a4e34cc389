package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
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

// forwardedMaxSkew is how far a forwarded request's timestamp may be from
// this instance's clock.
const forwardedMaxSkew = 30 * time.Second

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

func (a peerAuth) mac(method, path, rawQuery string, ts int64) []byte {
	h := hmac.New(sha256.New, a.secret)
	h.Write([]byte(method + "\n" + path + "\n" + rawQuery + "\n" + strconv.FormatInt(ts, 10)))
	return h.Sum(nil)
}

// sign sets ForwardedHeader on req.
func (a peerAuth) sign(req *http.Request, now time.Time) {
	ts := now.Unix()
	sig := a.mac(req.Method, req.URL.EscapedPath(), req.URL.RawQuery, ts)
	req.Header.Set(ForwardedHeader, "t="+strconv.FormatInt(ts, 10)+",s="+hex.EncodeToString(sig))
}

// forwarded reports whether req carries ForwardedHeader, and whether its
// signature is valid (present and valid: a peer sent it).
func (a peerAuth) forwarded(req *http.Request, now time.Time) (present, valid bool) {
	v := req.Header.Get(ForwardedHeader)
	if v == "" {
		return false, false
	}
	ts, sig, ok := parseForwarded(v)
	if !ok {
		return true, false
	}
	if d := now.Sub(time.Unix(ts, 0)); d > forwardedMaxSkew || d < -forwardedMaxSkew {
		return true, false
	}
	return true, hmac.Equal(sig, a.mac(req.Method, req.URL.EscapedPath(), req.URL.RawQuery, ts))
}

func parseForwarded(v string) (ts int64, sig []byte, ok bool) {
	if len(v) > 128 {
		return 0, nil, false
	}
	t, s, found := strings.Cut(v, ",")
	if !found || !strings.HasPrefix(t, "t=") || !strings.HasPrefix(s, "s=") {
		return 0, nil, false
	}
	ts, err := strconv.ParseInt(t[2:], 10, 64)
	if err != nil {
		return 0, nil, false
	}
	sig, err = hex.DecodeString(s[2:])
	if err != nil || len(sig) != sha256.Size {
		return 0, nil, false
	}
	return ts, sig, true
}

// SignForwarded sets ForwardedHeader on req as an instance sharing secret
// would: the request is then answered from the receiver's own running
// partitions only, and a range answer lists them in PartitionsHeader. For
// tools and tests that ask one instance for its part.
func SignForwarded(req *http.Request, secret []byte) {
	peerAuth{secret: secret}.sign(req, time.Now())
}
