package avro

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// fakeRegistry is a real in-process Schema Registry (srfake) that counts the
// requests it receives.
type fakeRegistry struct {
	*srfake.Registry
	requests atomic.Int64
}

func startFake(t testing.TB) *fakeRegistry {
	t.Helper()
	f := &fakeRegistry{Registry: srfake.New()}
	f.Intercept(func(http.ResponseWriter, *http.Request) bool {
		f.requests.Add(1)
		return false
	})
	t.Cleanup(f.Close)
	return f
}

// seed registers an Avro schema under subject and returns its id.
func (f *fakeRegistry) seed(t testing.TB, subject, schema string) int {
	t.Helper()
	id, _, err := f.RegisterSchema(subject, sr.Schema{Schema: schema, Type: sr.TypeAvro})
	if err != nil {
		t.Fatalf("seed %s: %v", subject, err)
	}
	return id
}

func newTestRegistry(t testing.TB, url string, opts ...Option) *Registry {
	t.Helper()
	r, err := NewRegistry(url, append([]Option{WithTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("NewRegistry(%q): %v", url, err)
	}
	return r
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
