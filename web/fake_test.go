package web

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// fakeQuerier is a tiny in-memory engine.Querier for this package's tests
// only: a slice kept sorted in the range order and scanned linearly. The
// real stores (docstore, redisstore) are written concurrently by others and
// are checked by engine/storetest; the web tests need only the contract.
type fakeQuerier struct {
	movies []engine.MovieStats // sorted by average desc, then id asc
	err    error               // when set, every call returns it
	panics bool                // when set, every call panics

	entered chan struct{} // when set, Get signals it once it is called...
	release chan struct{} // ...and then waits for release to close

	mu     sync.Mutex
	ranges []engine.RangeQuery // every Range query received
}

var _ engine.Querier = (*fakeQuerier)(nil)

func newFake(ms ...engine.MovieStats) *fakeQuerier {
	sort.Slice(ms, func(i, j int) bool { return cursorOf(ms[i]).Before(cursorOf(ms[j])) })
	return &fakeQuerier{movies: ms}
}

// mv returns a movie with count ratings summing to sum.
func mv(id, count int64, sum float64) engine.MovieStats {
	return engine.MovieStats{MovieID: id, Count: count, Sum: sum}
}

func cursorOf(m engine.MovieStats) engine.Cursor {
	return engine.Cursor{Avg: m.Avg(), MovieID: m.MovieID}
}

func (f *fakeQuerier) Get(ctx context.Context, id int64) (engine.MovieStats, error) {
	if f.entered != nil {
		f.entered <- struct{}{}
		select {
		case <-f.release:
		case <-ctx.Done():
			return engine.MovieStats{}, ctx.Err()
		}
	}
	if f.panics {
		panic("fake querier exploded")
	}
	if f.err != nil {
		return engine.MovieStats{}, f.err
	}
	for _, m := range f.movies {
		if m.MovieID == id {
			return m.Clone(), nil
		}
	}
	return engine.MovieStats{}, engine.ErrNotFound
}

func (f *fakeQuerier) Range(ctx context.Context, q engine.RangeQuery) (engine.Page, error) {
	f.mu.Lock()
	f.ranges = append(f.ranges, q)
	f.mu.Unlock()
	if f.panics {
		panic("fake querier exploded")
	}
	if f.err != nil {
		return engine.Page{}, f.err
	}
	if err := q.Validate(); err != nil {
		return engine.Page{}, err
	}
	var p engine.Page
	for _, m := range f.movies {
		avg := m.Avg()
		if avg < q.MinAvg || avg > q.MaxAvg || (q.After != nil && !q.After.Before(cursorOf(m))) {
			continue
		}
		p.Movies = append(p.Movies, m.Clone())
		if len(p.Movies) == q.Limit {
			c := cursorOf(m)
			p.Next = &c
			break
		}
	}
	return p, nil
}

func (f *fakeQuerier) rangeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ranges)
}

func (f *fakeQuerier) lastRange(t *testing.T) engine.RangeQuery {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ranges) == 0 {
		t.Fatal("the querier received no Range query")
	}
	return f.ranges[len(f.ranges)-1]
}

// get performs a request against h and returns the recorded answer.
func get(t *testing.T, h http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	return do(t, h, http.MethodGet, target)
}

func do(t *testing.T, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

// decode parses the JSON body of rec into a T, failing on unknown fields.
func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, rec.Body.String(), err)
	}
	return v
}

// wantJSONError checks status, content type and that the error body
// contains every part.
func wantJSONError(t *testing.T, rec *httptest.ResponseRecorder, status int, parts ...string) errorBody {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status = %d, want %d (body %q)", rec.Code, status, rec.Body.String())
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" && ct != "application/json; charset=utf-8" {
		t.Errorf("Content-Type = %q, want JSON", ct)
	}
	body := decode[errorBody](t, rec)
	if body.Error == "" {
		t.Errorf("error message is empty")
	}
	for _, p := range parts {
		if !bytes.Contains([]byte(body.Error), []byte(p)) {
			t.Errorf("error %q does not mention %q", body.Error, p)
		}
	}
	return body
}
