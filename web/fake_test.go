package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
	"github.com/keepstate/keepstate/movies"
)

// movieFake is the movie job's table for this package's tests: the real
// movie table (engine.MovieTable over engine/memstore) with the job's own
// key and value codecs, and a settable ownership and failures. The store
// holds every movie, as stale copies would on an instance owning only
// some partitions, so that an answer from a wrong partition shows.
type movieFake struct {
	tb     engine.Table
	job    engine.Runner
	n      int32 // partitions
	shared bool
	movies []movieStats // sorted by average desc, then id asc

	err    error // when set, Get and QueryLocal return it
	panics bool  // when set, Get and QueryLocal panic

	entered chan struct{} // when set, Get signals it once it is called...
	release chan struct{} // ...and then waits for release to close

	mu      sync.Mutex
	self    string
	owners  map[int32]string // partition -> owner address (self included)
	queries []engine.IndexQuery
	// lapsed makes Owner refuse this instance's own partitions, as the
	// engine does while its read lease has lapsed.
	lapsed atomic.Bool
}

var _ Table = (*movieFake)(nil)

// newFake returns the movie table of a store every instance shares (as
// Redis is), over 6 partitions, holding ms.
func newFake(ms ...movieStats) *movieFake {
	f, err := newMovieFake(6, ms)
	if err != nil {
		panic(err)
	}
	f.shared = true
	return f
}

// newMovieFake returns a movie table of n partitions holding ms, every
// partition owned by 127.0.0.1:1, which is this instance.
func newMovieFake(n int32, ms []movieStats) (*movieFake, error) {
	ctx := context.Background()
	job, err := movies.Job(nil).Runner()
	if err != nil {
		return nil, err
	}
	tb, err := memstore.New().OpenTable(ctx, movies.Spec)
	if err != nil {
		return nil, err
	}
	byPart := map[int32][]movieStats{}
	sorted := make([]movieStats, 0, len(ms))
	for _, m := range ms {
		m.Partition = engine.PartitionFor(movies.Key(m.MovieID), n)
		m.Version = 1
		byPart[m.Partition] = append(byPart[m.Partition], m)
		sorted = append(sorted, m)
	}
	for p, docs := range byPart {
		epoch, err := tb.Claim(ctx, p)
		if err != nil {
			return nil, err
		}
		b := engine.DocBatch{Partition: p, Epoch: epoch, Checkpoint: 1}
		for _, m := range docs {
			b.Docs = append(b.Docs, m.doc())
		}
		if err := tb.Apply(ctx, b); err != nil {
			return nil, err
		}
	}
	sort.Slice(sorted, func(i, j int) bool { return cursorOf(sorted[i]).Before(cursorOf(sorted[j])) })
	f := &movieFake{tb: tb, job: job, n: n, movies: sorted}
	owners := map[int32]string{}
	for p := int32(0); p < n; p++ {
		owners[p] = "127.0.0.1:1"
	}
	f.setOwners("127.0.0.1:1", owners)
	return f, nil
}

// movieStats is a movie as the tests state it.
type movieStats struct {
	MovieID   int64
	Partition int32
	Count     int64
	Sum       float64
	Version   int64
}

// Avg returns Sum/Count, or 0 for an empty aggregate.
func (m movieStats) Avg() float64 { return movies.Agg{Count: m.Count, Sum: m.Sum}.Avg() }

// doc returns m as the movie table's document.
func (m movieStats) doc() engine.Doc {
	a := movies.Agg{Count: m.Count, Sum: m.Sum}
	return engine.Doc{Key: movies.Key(m.MovieID), Partition: m.Partition, Version: m.Version,
		Sources: map[int32]int64{m.Partition: m.Version}, Value: movies.Values{}.Append(nil, a), Index: []engine.IndexValue{engine.Num(a.Avg())}}
}

// cursor is a position in the movie table's order: average descending,
// then the key's bytes ascending (ids 0 and up ascending, then the
// negative ids ascending).
type cursor struct {
	Avg     float64
	MovieID int64
}

// Before reports whether a sorts before b.
func (a cursor) Before(b cursor) bool {
	if a.Avg != b.Avg {
		return a.Avg > b.Avg
	}
	return uint64(a.MovieID) < uint64(b.MovieID)
}

// mv returns a movie with count ratings summing to sum.
func mv(id, count int64, sum float64) movieStats {
	return movieStats{MovieID: id, Count: count, Sum: sum}
}

func cursorOf(m movieStats) cursor {
	return cursor{Avg: m.Avg(), MovieID: m.MovieID}
}

// indexCursorOf is m's position in the movie table's avg index.
func indexCursorOf(m movieStats) engine.IndexCursor {
	return engine.IndexCursor{Value: engine.Num(m.Avg()), Key: movies.Key(m.MovieID)}
}

func (f *movieFake) setOwners(self string, o map[int32]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.self, f.owners = self, o
}

func (f *movieFake) ownership() (string, map[int32]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.self, f.owners
}

func (f *movieFake) part(id int64) int32 { return engine.PartitionFor(movies.Key(id), f.n) }

// mine reports whether partition p is answered here.
func (f *movieFake) mine(p int32) bool {
	if f.shared {
		return true
	}
	self, owners := f.ownership()
	return owners[p] == self
}

func (f *movieFake) Spec() engine.TableSpec            { return f.tb.Spec() }
func (f *movieFake) KeyKind() string                   { return f.job.KeyKind() }
func (f *movieFake) ParseKey(s string) ([]byte, error) { return f.job.ParseKey(s) }
func (f *movieFake) FormatKey(key []byte) string       { return f.job.FormatKey(key) }
func (f *movieFake) Shared() bool                      { return f.shared }

func (f *movieFake) ValueJSON(d engine.Doc) (json.RawMessage, error) {
	return f.job.ValueJSON(context.Background(), d.Value)
}

func (f *movieFake) Get(ctx context.Context, key []byte) (engine.Doc, error) {
	if f.entered != nil {
		f.entered <- struct{}{}
		select {
		case <-f.release:
		case <-ctx.Done():
			return engine.Doc{}, ctx.Err()
		}
	}
	if f.panics {
		panic("fake movie table exploded")
	}
	if f.err != nil {
		return engine.Doc{}, f.err
	}
	if !f.mine(engine.PartitionFor(key, f.n)) {
		return engine.Doc{}, fmt.Errorf("partition not here: %w", engine.ErrUnavailable)
	}
	return f.tb.Get(ctx, key)
}

// QueryLocal pages through the store until it has q.Limit movies of the
// partitions answered here, as the engine's TableView does.
func (f *movieFake) QueryLocal(ctx context.Context, q engine.IndexQuery) (engine.DocPage, []int32, error) {
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.mu.Unlock()
	if f.panics {
		panic("fake movie table exploded")
	}
	if f.err != nil {
		return engine.DocPage{}, nil, f.err
	}
	var covered []int32
	for p := int32(0); p < f.n; p++ {
		if f.mine(p) {
			covered = append(covered, p)
		}
	}
	var out engine.DocPage
	inner := q
	for done := false; !done; {
		page, err := f.tb.Query(ctx, inner)
		if err != nil {
			return engine.DocPage{}, nil, err
		}
		for _, d := range page.Docs {
			if !f.mine(d.Partition) {
				continue
			}
			out.Docs = append(out.Docs, d)
			if len(out.Docs) == q.Limit {
				out.Next = &engine.IndexCursor{Value: d.Index[0], Key: d.Key}
				done = true
				break
			}
		}
		if page.Next == nil {
			break
		}
		inner.After = page.Next
	}
	return out, covered, nil
}

func (f *movieFake) queryCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queries)
}

func (f *movieFake) lastQuery(t *testing.T) engine.IndexQuery {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queries) == 0 {
		t.Fatal("the movie table received no query")
	}
	return f.queries[len(f.queries)-1]
}

func (f *movieFake) Owner(ctx context.Context, key []byte) (string, bool, error) {
	self, owners := f.ownership()
	if f.shared {
		return self, true, nil
	}
	p := engine.PartitionFor(key, f.n)
	addr, ok := owners[p]
	if !ok {
		return "", false, fmt.Errorf("no owner: %w", engine.ErrUnavailable)
	}
	if addr == self && f.lapsed.Load() {
		return "", false, fmt.Errorf("partition %d: %w", p, engine.ErrLeaseLapsed)
	}
	return addr, addr == self, nil
}

func (f *movieFake) Membership(ctx context.Context) (engine.Membership, error) {
	self, owners := f.ownership()
	return engine.Membership{Partitions: f.n, Self: self, Owners: owners}, nil
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
