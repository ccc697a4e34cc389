package avro

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riferrei/srclient"
	"golang.org/x/sync/singleflight"

	"github.com/keepstate/keepstate/internal/redact"
)

// Defaults of the Registry options.
const (
	DefaultTimeout    = 10 * time.Second
	DefaultUnknownTTL = time.Minute
	DefaultUnknownMax = 1024 // unknown schema ids remembered
)

// Registry is a Confluent Schema Registry client (srclient underneath) with
// caches: schema id -> compiled writer schema, and subject+schema -> id.
// Registry ids are immutable, so cached schemas never expire and decoding
// needs no network and takes no lock after an id's first lookup. Unknown ids
// are remembered for the unknown-TTL, so that a stream of them does not hammer
// the registry. Concurrent misses of one id or subject share one request.
// Safe for concurrent use.
type Registry struct {
	url            string
	httpClient     *http.Client
	timeout        time.Duration
	unknown        *unknownCache
	user, password string
	log            *slog.Logger

	mu      sync.Mutex // serializes writers of the copy-on-write maps
	schemas atomic.Pointer[map[int]*writerSchema]
	ids     atomic.Pointer[map[subjectSchema]int]
	flight  singleflight.Group
}

type subjectSchema struct{ subject, schema string }

// Option configures a Registry.
type Option func(*Registry)

// WithHTTPClient makes the Registry send requests with c's transport,
// redirect policy and cookie jar. c.Timeout, when set, becomes the request
// timeout unless WithTimeout is also given.
func WithHTTPClient(c *http.Client) Option {
	return func(r *Registry) { r.httpClient = cmp.Or(c, r.httpClient) }
}

// WithTimeout bounds every registry request (default DefaultTimeout).
func WithTimeout(d time.Duration) Option {
	return func(r *Registry) { r.timeout = cmp.Or(max(d, 0), r.timeout) }
}

// WithLogger sets the logger (nil, the default, discards).
func WithLogger(l *slog.Logger) Option { return func(r *Registry) { r.log = l } }

// WithBasicAuth sends HTTP basic credentials with every request.
func WithBasicAuth(user, password string) Option {
	return func(r *Registry) { r.user, r.password = user, password }
}

// WithUnknownMax bounds how many unknown schema ids are remembered
// (default DefaultUnknownMax); the oldest is forgotten first.
func WithUnknownMax(n int) Option { return func(r *Registry) { r.unknown.max = max(n, 0) } }

// WithUnknownTTL sets how long an id the registry said it does not know is
// answered from the cache with ErrUnknownSchema (default DefaultUnknownTTL;
// 0 or less asks the registry every time).
func WithUnknownTTL(d time.Duration) Option { return func(r *Registry) { r.unknown.ttl = max(d, 0) } }

// NewRegistry returns a client of the registry at rawURL, e.g.
// "http://localhost:8081", or fails when rawURL is not an http(s) URL. It
// sends no request (see Ping). Credentials in rawURL ("http://key:secret@host")
// are taken out of it and sent as basic auth unless WithBasicAuth is given;
// URL and messages never show them.
func NewRegistry(rawURL string, opts ...Option) (*Registry, error) {
	clean, user, password := redact.Userinfo(rawURL)
	u, err := url.Parse(clean)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("schema registry url %q is not an http(s) url", redact.URL(rawURL))
	}
	r := &Registry{
		url:        strings.TrimRight(clean, "/"),
		httpClient: &http.Client{},
		unknown:    newUnknownCache(DefaultUnknownTTL, DefaultUnknownMax),
	}
	for _, o := range opts {
		o(r)
	}
	if r.user == "" && r.password == "" {
		r.user, r.password = user, password
	}
	r.timeout = cmp.Or(r.timeout, r.httpClient.Timeout, DefaultTimeout)
	r.log = cmp.Or(r.log, slog.New(slog.DiscardHandler))
	r.schemas.Store(&map[int]*writerSchema{})
	r.ids.Store(&map[subjectSchema]int{})
	return r, nil
}

// URL returns the registry URL without credentials or a trailing slash.
func (r *Registry) URL() string { return r.url }

// Ping checks that the registry answers (GET /config). Any failure, a
// cancelled ctx included, wraps ErrRegistryUnavailable and names the URL.
func (r *Registry) Ping(ctx context.Context) error {
	_, err := call(ctx, r, "ping", false, (*client).GetGlobalCompatibilityLevel)
	if err != nil && !errors.Is(err, ErrRegistryUnavailable) {
		// A canceled ctx or a registry error answer: still "does not answer".
		return fmt.Errorf("%w: %w", ErrRegistryUnavailable, err)
	}
	return err
}

// Register registers schema (Avro JSON) under subject, as the Confluent
// serializer does with auto-registration (see ValueSubject), and returns
// its id, from the cache after the first success. Errors wrap
// ErrRegistryUnavailable, ErrSchemaRejected or the context's error.
func (r *Registry) Register(ctx context.Context, subject, schema string) (int, error) {
	key := subjectSchema{subject, schema}
	if id, ok := (*r.ids.Load())[key]; ok {
		return id, nil
	}
	return shared(ctx, r, "register\x00"+subject+"\x00"+schema, func(fctx context.Context) (int, error) {
		if id, ok := (*r.ids.Load())[key]; ok {
			return id, nil
		}
		got, err := call(fctx, r, "register subject "+subject, true, func(c *client) (*srclient.Schema, error) {
			return c.CreateSchema(subject, schema, srclient.Avro)
		})
		if err != nil {
			return 0, err
		}
		w := newWriterSchema(got.ID(), got)
		publish(&r.mu, &r.schemas, w.id, w)
		publish(&r.mu, &r.ids, key, got.ID())
		r.log.Debug("registered schema", "subject", subject, "id", got.ID(), "version", got.Version())
		return got.ID(), nil
	})
}

// writerOf splits a Confluent-framed record into its writer schema, fetched
// on a miss, and Avro payload. Errors are those of Unframe, or wrap
// ErrUnknownSchema, ErrRegistryUnavailable, ctx's error or (the schema is
// unusable) ErrDecode.
func (r *Registry) writerOf(ctx context.Context, b []byte) (*writerSchema, []byte, error) {
	id, payload, err := Unframe(b)
	if err != nil {
		return nil, nil, err
	}
	w, err, ok := r.cachedWriter(id)
	if !ok && id < 0 {
		err = fmt.Errorf("%w: schema id %d is negative", ErrUnknownSchema, id)
	} else if !ok {
		w, err = shared(ctx, r, "id\x00"+strconv.Itoa(id), func(fctx context.Context) (*writerSchema, error) {
			// A flight that ended just before this one may have filled the cache.
			if w, err, ok := r.cachedWriter(id); ok {
				return w, err
			}
			got, err := call(fctx, r, "fetch schema id "+strconv.Itoa(id), false,
				func(c *client) (*srclient.Schema, error) { return c.GetSchema(id) })
			if err != nil {
				if errors.Is(err, ErrUnknownSchema) {
					r.unknown.add(id, time.Now())
				}
				r.log.Debug("schema fetch failed", "id", id, "err", err)
				return nil, err
			}
			w := newWriterSchema(id, got)
			publish(&r.mu, &r.schemas, id, w)
			r.unknown.forget(id)
			r.log.Debug("fetched schema", "id", id, "usable", w.err == nil)
			return w, nil
		})
	}
	if err == nil {
		err = w.err
	}
	return w, payload, err
}

// cachedWriter answers from the caches; ok is false on a miss.
func (r *Registry) cachedWriter(id int) (w *writerSchema, err error, ok bool) {
	if w, ok = (*r.schemas.Load())[id]; ok {
		return w, nil, true
	}
	if r.unknown.has(id, time.Now()) {
		return nil, fmt.Errorf("%w: schema id %d not in registry %s (cached)", ErrUnknownSchema, id, r.url), true
	}
	return nil, nil, false
}

// shared runs fetch once for all concurrent callers with the same key. The
// fetch is detached from any one caller's cancellation (it is bounded by
// the registry timeout); each caller stops waiting when its own ctx ends.
func shared[T any](ctx context.Context, r *Registry, key string, fetch func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("schema registry %s: %w", r.url, err)
	}
	ch := r.flight.DoChan(key, func() (any, error) { return fetch(context.WithoutCancel(ctx)) })
	select {
	case res := <-ch:
		v, _ := res.Val.(T)
		return v, res.Err
	case <-ctx.Done():
		return zero, fmt.Errorf("schema registry %s: %w", r.url, ctx.Err())
	}
}

// publish adds k -> v to the copy-on-write map *m unless k is there: ids
// are immutable, so the first value (compiled schema, id) stays.
func publish[K comparable, V any](mu *sync.Mutex, m *atomic.Pointer[map[K]V], k K, v V) {
	mu.Lock()
	defer mu.Unlock()
	old := *m.Load()
	if _, ok := old[k]; ok {
		return
	}
	next := maps.Clone(old)
	next[k] = v
	m.Store(&next)
}

// client is srclient's client, which Registry makes one of per call.
type client = srclient.SchemaRegistryClient

// callTransport binds the requests of one srclient call (srclient takes no
// context) to ctx and remembers the last HTTP status, which srclient drops
// from non-JSON error answers.
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
// registry timeout) and maps its error to the package sentinels. op names
// the operation for messages ("fetch schema id 7", "register subject
// ratings-value"); registering is true when a refusal means the schema was
// rejected.
func call[T any](ctx context.Context, r *Registry, op string, registering bool,
	fn func(*client) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	tr := &callTransport{ctx: cctx, base: cmp.Or(r.httpClient.Transport, http.DefaultTransport)}
	hc := *r.httpClient
	hc.Transport, hc.Timeout = tr, 0 // cctx carries the timeout
	c := srclient.NewSchemaRegistryClient(r.url, srclient.WithClient(&hc))
	c.CachingEnabled(false) // Registry caches
	if r.user != "" {
		c.SetCredentials(r.user, r.password)
	}
	v, err := fn(c)
	if err == nil {
		return v, nil
	}
	status := int(tr.status.Load())
	var se srclient.Error
	isRegistryErr := errors.As(err, &se)
	rejected := status == http.StatusConflict || status == http.StatusUnprocessableEntity ||
		se.Code/100 == 409 || se.Code/100 == 422
	switch {
	case ctx.Err() != nil:
		return v, fmt.Errorf("schema registry %s: %s: %w", r.url, op, ctx.Err())
	case isRegistryErr && se.Code/100 == 404:
		// 40401 subject, 40402 version, 40403 schema not found.
		return v, fmt.Errorf("%w: %s: registry %s answered %d: %s", ErrUnknownSchema, op, r.url, se.Code, se.Message)
	case registering && isRegistryErr && rejected:
		return v, fmt.Errorf("%w: %s: registry %s answered %d: %s", ErrSchemaRejected, op, r.url, se.Code, se.Message)
	case status == 0:
		return v, fmt.Errorf("%w: %s: %s: %v", ErrRegistryUnavailable, op, r.url, err)
	}
	// 5xx, 408, 429, 401/403, a 404 without a registry error code (not a
	// registry, or a wrong path), or a 2xx that does not parse.
	return v, fmt.Errorf("%w: %s: %s answered HTTP %d: %v", ErrRegistryUnavailable, op, r.url, status, err)
}

// unknownCache remembers, for a TTL, schema ids the registry said it does
// not know. It holds at most max ids, forgetting the oldest first, so a
// producer writing random ids costs O(1) memory and O(1) work per id.
// Safe for concurrent use.
type unknownCache struct {
	ttl time.Duration
	max int

	mu    sync.Mutex
	until map[int]time.Time
	order []int // ring of ids in insertion order; head is the oldest
	head  int
}

func newUnknownCache(ttl time.Duration, max int) *unknownCache {
	return &unknownCache{ttl: ttl, max: max, until: map[int]time.Time{}}
}

// has reports whether id is remembered as unknown at now.
func (c *unknownCache) has(id int, now time.Time) bool {
	if c.ttl <= 0 || c.max <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.until[id]
	if ok && !now.Before(u) {
		delete(c.until, id) // its ring slot is reused when its turn comes
		return false
	}
	return ok
}

// add remembers id as unknown until now+ttl, forgetting the oldest entry
// when the cache is full.
func (c *unknownCache) add(id int, now time.Time) {
	if c.ttl <= 0 || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.until[id]; !ok && len(c.order) < c.max {
		c.order = append(c.order, id)
	} else if !ok {
		// Evict the oldest slot. Every map entry has a slot, so the map
		// never holds more than max ids. An id can sit in the ring twice
		// (expired, then added again): evicting its older slot forgets it
		// early, which costs one more lookup, never memory.
		delete(c.until, c.order[c.head])
		c.order[c.head], c.head = id, (c.head+1)%c.max
	}
	c.until[id] = now.Add(c.ttl)
}

// forget drops id (the registry knows it now).
func (c *unknownCache) forget(id int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.until, id)
}
