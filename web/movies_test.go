package web

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/movies"
)

func TestGetMovie(t *testing.T) {
	fq := newFake(mv(362, 2, 18), mv(7, 3, 25), mv(-4, 1, 2.5), mv(math.MaxInt64, 1, 10))
	h := New(Options{Tables: []Table{fq}}).Handler()
	tests := []struct {
		id   string
		want movieJSON
	}{
		{"362", movieJSON{MovieID: 362, Rating: 9, Count: 2}},
		{"7", movieJSON{MovieID: 7, Rating: 25.0 / 3, Count: 3}},
		{"-4", movieJSON{MovieID: -4, Rating: 2.5, Count: 1}},
		{"9223372036854775807", movieJSON{MovieID: math.MaxInt64, Rating: 10, Count: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			rec := get(t, h, "/movies/"+tc.id)
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200 (body %q)", rec.Code, rec.Body.String())
			}
			if got := decode[movieJSON](t, rec); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestGetMovieErrors(t *testing.T) {
	h := New(Options{Tables: []Table{newFake(mv(362, 2, 18))}}).Handler()
	tests := []struct {
		name, target string
		status       int
		parts        []string
	}{
		{"unknown", "/movies/363", 404, []string{"movie 363 not found"}},
		{"letters", "/movies/abc", 400, []string{"id", `"abc"`}},
		{"float", "/movies/1.5", 400, []string{"id", `"1.5"`}},
		{"overflow", "/movies/9223372036854775808", 400, []string{"id"}},
		{"empty id", "/movies/", 404, []string{"/movies/"}},
		{"hex", "/movies/0x10", 400, []string{"id"}},
		{"space", "/movies/%201", 400, []string{"id"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantJSONError(t, get(t, h, tc.target), tc.status, tc.parts...)
		})
	}
}

func TestRangeMovies(t *testing.T) {
	fq := newFake(
		mv(1, 2, 16),   // 8
		mv(2, 1, 9.5),  // 9.5
		mv(3, 4, 40),   // 10
		mv(4, 1, 8),    // 8
		mv(5, 3, 12),   // 4
		mv(6, 2, 17.5), // 8.75
	)
	h := New(Options{Tables: []Table{fq}}).Handler()
	tests := []struct {
		name, query string
		wantIDs     []int64
		wantNext    bool
	}{
		{"all", "", []int64{3, 2, 6, 1, 4, 5}, false},
		{"minAvg", "minAvg=8", []int64{3, 2, 6, 1, 4}, false},
		{"minAvg and maxAvg", "minAvg=8&maxAvg=9.5", []int64{2, 6, 1, 4}, false},
		{"ties by id", "minAvg=8&maxAvg=8", []int64{1, 4}, false},
		{"limit", "minAvg=8&limit=2", []int64{3, 2}, true},
		{"negative minAvg", "minAvg=-3&limit=1000", []int64{3, 2, 6, 1, 4, 5}, false},
		{"none", "minAvg=10.5", nil, false},
		{"empty after", "after=&limit=6", []int64{3, 2, 6, 1, 4, 5}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := get(t, h, "/movies?"+tc.query)
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200 (body %q)", rec.Code, rec.Body.String())
			}
			if !strings.Contains(rec.Body.String(), `"movies":[`) {
				t.Errorf("movies is not a JSON array: %s", rec.Body.String())
			}
			page := decode[moviesPage](t, rec)
			var ids []int64
			for _, m := range page.Movies {
				ids = append(ids, m.MovieID)
				var want movieStats
				for _, fm := range fq.movies {
					if fm.MovieID == m.MovieID {
						want = fm
					}
				}
				if m.Rating != want.Avg() || m.Count != want.Count {
					t.Errorf("movie %d = %+v, want rating %v count %d", m.MovieID, m, want.Avg(), want.Count)
				}
			}
			if fmt.Sprint(ids) != fmt.Sprint(tc.wantIDs) {
				t.Errorf("ids = %v, want %v", ids, tc.wantIDs)
			}
			if (page.Next != "") != tc.wantNext {
				t.Errorf("next = %q, want a cursor: %v", page.Next, tc.wantNext)
			}
		})
	}
}

func TestRangeDefaults(t *testing.T) {
	fq := newFake()
	h := New(Options{Tables: []Table{fq}}).Handler()
	if rec := get(t, h, "/movies"); rec.Code != http.StatusOK {
		t.Fatalf("status = %d, want 200 (body %q)", rec.Code, rec.Body.String())
	}
	q := fq.lastQuery(t)
	if q.Index != "avg" || !q.Desc || q.Limit != DefaultLimit || q.HasMin || q.HasMax || q.After != nil {
		t.Errorf("default query = %+v, want avg descending, limit %d, no bounds, no cursor", q, DefaultLimit)
	}
	if rec := get(t, h, fmt.Sprintf("/movies?limit=%d&minAvg=1e-3&maxAvg=7", MaxLimit)); rec.Code != http.StatusOK {
		t.Fatalf("limit %d: status = %d, want 200 (body %q)", MaxLimit, rec.Code, rec.Body.String())
	}
	if q := fq.lastQuery(t); q.Limit != MaxLimit || !q.HasMin || q.Min.Num != 1e-3 || !q.HasMax || q.Max.Num != 7 {
		t.Errorf("query = %+v, want limit %d, bounds [0.001, 7]", q, MaxLimit)
	}
}

func TestRangeBadRequests(t *testing.T) {
	fq := newFake(mv(1, 1, 9), mv(2, 1, 8))
	h := New(Options{Tables: []Table{fq}}).Handler()
	valid := encodeCursor(indexCursorOf(mv(1, 1, 9)))
	flipped := []byte(valid)
	flipped[5] ^= 1 // still base64url, wrong checksum
	tests := []struct {
		name, query, param string
	}{
		{"minAvg letters", "minAvg=abc", "minAvg"},
		{"minAvg empty", "minAvg=", "minAvg"},
		{"minAvg NaN", "minAvg=NaN", "minAvg"},
		{"minAvg Inf", "minAvg=Inf", "minAvg"},
		{"minAvg infinity", "minAvg=-infinity", "minAvg"},
		{"maxAvg +Inf", "maxAvg=%2BInf", "maxAvg"},
		{"maxAvg overflow", "maxAvg=1e400", "maxAvg"},
		{"maxAvg letters", "maxAvg=ten", "maxAvg"},
		{"min above max", "minAvg=9&maxAvg=8", "minAvg"},
		{"minAvg twice", "minAvg=1&minAvg=2", "minAvg"},
		{"limit zero", "limit=0", "limit"},
		{"limit negative", "limit=-1", "limit"},
		{"limit above cap", fmt.Sprintf("limit=%d", MaxLimit+1), "limit"},
		{"limit huge", "limit=99999999999999999999", "limit"},
		{"limit float", "limit=1.5", "limit"},
		{"limit letters", "limit=ten", "limit"},
		{"after garbage", "after=garbage", "after"},
		{"after flipped", "after=" + string(flipped), "after"},
		{"after truncated", "after=" + valid[:len(valid)-1], "after"},
		{"after extended", "after=" + valid + "A", "after"},
		{"after padded", "after=" + url.QueryEscape(valid+"="), "after"},
		{"after std base64", "after=" + url.QueryEscape(strings.NewReplacer("-", "+", "_", "/").Replace(valid)) + "%2B", "after"},
		{"after NaN avg", "after=" + encodeCursor(engine.IndexCursor{Value: engine.Num(math.NaN()), Key: movies.Key(1)}), "after"},
		{"after Inf avg", "after=" + encodeCursor(engine.IndexCursor{Value: engine.Num(math.Inf(1)), Key: movies.Key(1)}), "after"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := fq.queryCount()
			wantJSONError(t, get(t, h, "/movies?"+tc.query), http.StatusBadRequest, tc.param)
			if fq.queryCount() != before {
				t.Errorf("a bad request reached the store")
			}
		})
	}
}

// TestPagingVisitsEverythingOnce pages through movies with many tied
// averages and checks each one in range comes exactly once, in order.
func TestPagingVisitsEverythingOnce(t *testing.T) {
	var ms []movieStats
	for id := int64(1); id <= 97; id++ {
		// Averages 0, 0.5, ..., 10 with ties; some ids negative.
		sum := float64((id*7)%21) / 2
		mid := id
		if id%5 == 0 {
			mid = -id
		}
		ms = append(ms, mv(mid, 1, sum))
	}
	fq := newFake(ms...)
	h := New(Options{Tables: []Table{fq}}).Handler()

	for _, tc := range []struct {
		minAvg string
		limit  int
	}{{"0", 10}, {"4.5", 7}, {"0", 1}, {"9.5", 1000}, {"0", 97}} {
		t.Run(fmt.Sprintf("minAvg=%s,limit=%d", tc.minAvg, tc.limit), func(t *testing.T) {
			var want []int64
			for _, m := range fq.movies {
				if m.Avg() >= mustFloat(t, tc.minAvg) {
					want = append(want, m.MovieID)
				}
			}
			var got []int64
			after, pages := "", 0
			for {
				pages++
				if pages > len(ms)+2 {
					t.Fatalf("paging did not end after %d pages", pages)
				}
				target := fmt.Sprintf("/movies?minAvg=%s&limit=%d&after=%s", tc.minAvg, tc.limit, url.QueryEscape(after))
				rec := get(t, h, target)
				if rec.Code != http.StatusOK {
					t.Fatalf("page %d: status = %d (body %q)", pages, rec.Code, rec.Body.String())
				}
				page := decode[moviesPage](t, rec)
				if len(page.Movies) > tc.limit {
					t.Fatalf("page %d has %d movies, limit %d", pages, len(page.Movies), tc.limit)
				}
				for _, m := range page.Movies {
					got = append(got, m.MovieID)
				}
				if page.Next == "" {
					break
				}
				after = page.Next
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("visited %d movies %v,\nwant %d movies %v", len(got), got, len(want), want)
			}
			seen := map[int64]bool{}
			for _, id := range got {
				if seen[id] {
					t.Errorf("movie %d visited twice", id)
				}
				seen[id] = true
			}
		})
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	var f float64
	if _, err := fmt.Sscan(s, &f); err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
	return f
}

func TestStoreErrors(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		panics   bool
		status   int
		retry    string
		parts    []string
		logged   string
		noLeakOf string
		noMovies bool
	}{
		{name: "unavailable", err: fmt.Errorf("redis: dial tcp: refused: %w", engine.ErrUnavailable),
			status: 503, retry: RetryAfterSeconds, parts: []string{"unavailable"}, logged: "dial tcp", noLeakOf: "dial tcp"},
		{name: "corrupt store", err: fmt.Errorf("docstore /data: %w: sst 000009 checksum mismatch", engine.ErrCorrupt),
			status: 503, retry: RetryAfterSeconds, parts: []string{"rebuilt"}, logged: "000009", noLeakOf: "000009"},
		{name: "other error", err: fmt.Errorf("bbolt: page 7 corrupt"),
			status: 500, parts: []string{"internal"}, logged: "page 7 corrupt", noLeakOf: "corrupt"},
		{name: "panic", panics: true,
			status: 500, parts: []string{"internal"}, logged: "fake movie table exploded", noLeakOf: "exploded"},
		{name: "no movie table", noMovies: true, status: 503, retry: RetryAfterSeconds, parts: []string{"unavailable"}},
	}
	for _, tc := range tests {
		for _, target := range []string{"/movies/1", "/movies?minAvg=1"} {
			t.Run(tc.name+" "+target, func(t *testing.T) {
				var logs testkit.SyncBuffer
				f := newFake()
				f.err, f.panics = tc.err, tc.panics
				opts := Options{Tables: []Table{f}, Logger: logs.Logger()}
				if tc.noMovies {
					opts.Tables = nil
				}
				rec := get(t, New(opts).Handler(), target)
				body := wantJSONError(t, rec, tc.status, tc.parts...)
				if got := rec.Header().Get("Retry-After"); got != tc.retry {
					t.Errorf("Retry-After = %q, want %q", got, tc.retry)
				}
				if tc.logged != "" && !strings.Contains(logs.String(), tc.logged) {
					t.Errorf("log does not contain %q:\n%s", tc.logged, logs.String())
				}
				if tc.noLeakOf != "" && strings.Contains(body.Error, tc.noLeakOf) {
					t.Errorf("error %q leaks the internal cause", body.Error)
				}
			})
		}
	}
}

func TestQueryTimeout(t *testing.T) {
	fq := newFake()
	fq.entered, fq.release = make(chan struct{}, 1), make(chan struct{})
	defer close(fq.release)
	h := New(Options{Tables: []Table{fq}, QueryTimeout: 20 * time.Millisecond}).Handler()
	rec := get(t, h, "/movies/1")
	wantJSONError(t, rec, http.StatusServiceUnavailable, "timed out")
	if got := rec.Header().Get("Retry-After"); got != RetryAfterSeconds {
		t.Errorf("Retry-After = %q, want %q", got, RetryAfterSeconds)
	}
}
