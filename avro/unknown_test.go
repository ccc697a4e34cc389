package avro

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// len returns how many ids c remembers (expired ones included until they
// are looked up or evicted).
func (c *unknownCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.until)
}

func TestUnknownCacheIsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newUnknownCache(time.Minute, 8)
	for id := 0; id < 10000; id++ {
		c.add(id, now)
		if n := c.len(); n > 8 {
			t.Fatalf("after %d ids the cache holds %d, want at most 8", id+1, n)
		}
	}
	for id := 10000 - 8; id < 10000; id++ {
		if !c.has(id, now) {
			t.Errorf("recent id %d forgotten", id)
		}
	}
	if c.has(0, now) {
		t.Errorf("oldest id 0 still remembered after 10000 more")
	}
	if c.has(9999, now.Add(time.Minute)) {
		t.Errorf("id 9999 remembered after its TTL")
	}
	if len(c.order) > 8 {
		t.Errorf("ring grew to %d, want at most 8", len(c.order))
	}
}

func TestUnknownCacheTable(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name string
		ttl  time.Duration
		max  int
		at   time.Duration
		want bool
	}{
		{"within ttl", time.Minute, 4, 30 * time.Second, true},
		{"after ttl", time.Minute, 4, time.Minute, false},
		{"ttl zero disables", 0, 4, 0, false},
		{"max zero disables", time.Minute, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newUnknownCache(tt.ttl, tt.max)
			c.add(7, now)
			if got := c.has(7, now.Add(tt.at)); got != tt.want {
				t.Errorf("has(7) = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRandomSchemaIDsUseBoundedMemory decodes records with thousands of
// distinct unknown schema ids: each costs one registry request and the
// cache never holds more than its bound.
func TestRandomSchemaIDsUseBoundedMemory(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	r := newTestRegistry(t, fake.URL(), WithUnknownMax(64), WithUnknownTTL(time.Hour))
	const ids = 2000
	before := fake.requests.Load()
	for id := 1000; id < 1000+ids; id++ {
		if _, err := r.DecodeRating(ctx, Frame(id, []byte{2, 0})); !errors.Is(err, ErrUnknownSchema) {
			t.Fatalf("DecodeRating(id %d) = %v, want ErrUnknownSchema", id, err)
		}
	}
	if n := r.unknown.len(); n > 64 {
		t.Errorf("negative cache holds %d ids, want at most 64", n)
	}
	if n := len(*r.schemas.Load()); n != 0 {
		t.Errorf("schema cache holds %d entries after only unknown ids, want 0", n)
	}
	if n := fake.requests.Load() - before; n != ids {
		t.Errorf("%d distinct unknown ids sent %d requests, want %d", ids, n, ids)
	}
	// The most recent ids are still answered from the cache.
	before = fake.requests.Load()
	if _, err := r.DecodeRating(ctx, Frame(1000+ids-1, []byte{2, 0})); !errors.Is(err, ErrUnknownSchema) {
		t.Fatalf("DecodeRating(recent unknown id) = %v", err)
	}
	if n := fake.requests.Load() - before; n != 0 {
		t.Errorf("a cached unknown id sent %d requests, want 0", n)
	}
}

// TestCredentials checks that credentials reach the registry as basic
// auth, whether given as options or inside the URL, and that no error or
// URL shows them.
func TestCredentials(t *testing.T) {
	const user, secret = "key", "planted-s3cret-9f1e"
	fake := srfake.New(srfake.WithAuth("Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+secret))))
	t.Cleanup(fake.Close)
	ctx := testCtx(t)
	withUser := strings.Replace(fake.URL(), "http://", "http://"+user+":"+secret+"@", 1)
	tests := []struct {
		name    string
		url     string
		opts    []Option
		wantErr bool
	}{
		{"options", fake.URL(), []Option{WithBasicAuth(user, secret)}, false},
		{"in url", withUser, nil, false},
		{"none", fake.URL(), nil, true},
		{"wrong password in url", strings.Replace(withUser, secret, secret+"x", 1), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRegistry(t, tt.url, tt.opts...)
			if strings.Contains(r.URL(), secret) {
				t.Errorf("URL() = %q holds the password", r.URL())
			}
			err := r.Ping(ctx)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Ping = %v, want error %v", err, tt.wantErr)
			}
			// An unknown id's error (what becomes a DLQ reason) hides it too.
			_, derr := r.DecodeRating(ctx, Frame(99999, []byte{2, 0}))
			for _, e := range []error{err, derr} {
				if e != nil && strings.Contains(e.Error(), secret) {
					t.Errorf("error %q holds the password", e)
				}
			}
		})
	}
	if _, err := NewRegistry("ftp://" + user + ":" + secret + "@host"); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("NewRegistry(bad scheme with password) = %v, want an error without the password", err)
	}
}
