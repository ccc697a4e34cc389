package avro

import (
	"encoding/base64"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/sr/srfake"
)

type countingTransport struct {
	n    atomic.Int64
	base http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

func TestWithHTTPClientIsUsed(t *testing.T) {
	fake := startFake(t)
	tr := &countingTransport{base: http.DefaultTransport}
	r := newTestRegistry(t, fake.URL(), WithHTTPClient(&http.Client{Transport: tr}))
	if err := r.Ping(testCtx(t)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if got := tr.n.Load(); got != 1 {
		t.Errorf("custom transport saw %d requests, want 1", got)
	}
}

func TestWithBasicAuth(t *testing.T) {
	fake := srfake.New(srfake.WithAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("ann:secret"))))
	t.Cleanup(fake.Close)
	ctx := testCtx(t)
	if err := newTestRegistry(t, fake.URL(), WithBasicAuth("ann", "secret")).Ping(ctx); err != nil {
		t.Errorf("Ping with the right credentials = %v, want nil", err)
	}
	err := newTestRegistry(t, fake.URL()).Ping(ctx)
	if !errors.Is(err, ErrRegistryUnavailable) {
		t.Errorf("Ping without credentials = %v, want ErrRegistryUnavailable", err)
	}
}
