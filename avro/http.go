package avro

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/riferrei/srclient"
)

// callTransport binds the requests of one srclient call (srclient takes no
// context) to ctx and remembers the last HTTP status it saw, which
// classify needs because srclient drops it from non-JSON error answers.
type callTransport struct {
	ctx    context.Context
	base   http.RoundTripper
	status atomic.Int64
}

// RoundTrip sends req under the call's context.
func (t *callTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req.WithContext(t.ctx))
	if resp != nil {
		t.status.Store(int64(resp.StatusCode))
	}
	return resp, err
}

// call runs fn with a srclient whose requests are bound to ctx (plus the
// registry timeout) and classifies its error. op names the operation for
// messages ("fetch schema id 7", "register subject ratings-value");
// registering is true when a refusal means the schema was rejected.
func (r *Registry) call(ctx context.Context, op string, registering bool, fn func(c *srclient.SchemaRegistryClient) error) error {
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	tr := &callTransport{ctx: cctx, base: r.transport}
	hc := *r.httpClient
	hc.Transport = tr
	hc.Timeout = 0 // cctx carries it
	c := srclient.NewSchemaRegistryClient(r.url, srclient.WithClient(&hc))
	c.CachingEnabled(false) // Registry caches
	if r.user != "" {
		c.SetCredentials(r.user, r.password)
	}
	err := fn(c)
	if err == nil {
		return nil
	}
	return r.classify(ctx, op, registering, err, int(tr.status.Load()))
}

// classify maps a srclient error to the package sentinels.
func (r *Registry) classify(ctx context.Context, op string, registering bool, err error, status int) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("schema registry %s: %s: %w", r.url, op, ctxErr)
	}
	var se srclient.Error
	isRegistryErr := errors.As(err, &se)
	switch {
	case isRegistryErr && se.Code/100 == 404:
		// 40401 subject, 40402 version, 40403 schema not found.
		return fmt.Errorf("%w: %s: registry %s answered %d: %s", ErrUnknownSchema, op, r.url, se.Code, se.Message)
	case registering && isRegistryErr && (status == http.StatusConflict || status == http.StatusUnprocessableEntity || se.Code/100 == 409 || se.Code/100 == 422):
		return fmt.Errorf("%w: %s: registry %s answered %d: %s", ErrSchemaRejected, op, r.url, se.Code, se.Message)
	case status == 0:
		return fmt.Errorf("%w: %s: %s: %v", ErrRegistryUnavailable, op, r.url, err)
	default:
		// 5xx, 408, 429, 401/403, a 404 without a registry error code (not
		// a registry, or a wrong path), or a 2xx that does not parse.
		return fmt.Errorf("%w: %s: %s answered HTTP %d: %v", ErrRegistryUnavailable, op, r.url, status, err)
	}
}
