package testkit

import (
	"encoding/base64"
	"testing"

	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// Registry is an in-process Confluent-compatible Schema Registry (srfake)
// on a free loopback port, safe for concurrent use, closed by t.Cleanup.
type Registry struct {
	fake *srfake.Registry
}

// StartRegistry starts an empty in-process Schema Registry.
func StartRegistry(t testing.TB) *Registry { return startRegistry(t) }

// StartRegistryWithAuth is StartRegistry for a registry that requires HTTP
// basic authentication with user and password (401 without credentials,
// 403 with wrong ones).
func StartRegistryWithAuth(t testing.TB, user, password string) *Registry {
	return startRegistry(t, srfake.WithAuth("Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+password))))
}

func startRegistry(t testing.TB, opts ...srfake.Option) *Registry {
	r := srfake.New(opts...)
	t.Cleanup(r.Close)
	return &Registry{fake: r}
}

// URL returns the registry's base URL ("http://127.0.0.1:PORT").
func (r *Registry) URL() string { return r.fake.URL() }

// Fake returns the srfake registry, to seed schemas, inspect subjects or
// intercept requests.
func (r *Registry) Fake() *srfake.Registry { return r.fake }
