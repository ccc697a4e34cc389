package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

const testSecret = "test-peer-secret-0123456789"

// fakeRouter is a Router over a fixed ownership: partitions are owned by
// addresses, and local holds the partitions RUNNING here.
type fakeRouter struct {
	n     int32
	self  string
	local *fakeQuerier // this instance's store (all partitions)

	mu     sync.Mutex
	owners map[int32]string // partition -> owner address (self included)
	// lapsed makes Owner refuse this instance's own partitions, as the
	// engine does while its read lease has lapsed.
	lapsed atomic.Bool
}

func (r *fakeRouter) setOwners(o map[int32]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owners = o
}

func (r *fakeRouter) ownerMap() map[int32]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owners
}

func (r *fakeRouter) part(id int64) int32 {
	return engine.PartitionFor(engine.Int64Keys.Append(nil, id), r.n)
}

func (r *fakeRouter) Owner(ctx context.Context, id int64) (string, bool, error) {
	addr, ok := r.ownerMap()[r.part(id)]
	if !ok {
		return "", false, fmt.Errorf("no owner: %w", engine.ErrUnavailable)
	}
	if addr == r.self && r.lapsed.Load() {
		return "", false, fmt.Errorf("partition %d: %w", r.part(id), engine.ErrLeaseLapsed)
	}
	return addr, addr == r.self, nil
}

func (r *fakeRouter) Membership(ctx context.Context) (engine.Membership, error) {
	return engine.Membership{Partitions: r.n, Self: r.self, Owners: r.ownerMap(), Taken: time.Now()}, nil
}

func (r *fakeRouter) RangeLocal(ctx context.Context, q engine.RangeQuery) (engine.Page, []int32, error) {
	var covered []int32
	mine := map[int32]bool{}
	for p, a := range r.ownerMap() {
		if a == r.self {
			covered = append(covered, p)
			mine[p] = true
		}
	}
	sort.Slice(covered, func(i, j int) bool { return covered[i] < covered[j] })
	inner := q
	inner.Limit = 1 << 20
	page, err := r.local.Range(ctx, inner)
	if err != nil {
		return engine.Page{}, nil, err
	}
	var out engine.Page
	for _, m := range page.Movies {
		if !mine[r.part(m.MovieID)] {
			continue
		}
		out.Movies = append(out.Movies, m)
		if len(out.Movies) == q.Limit {
			c := cursorOf(m)
			out.Next = &c
			break
		}
	}
	return out, covered, nil
}

// node is one instance of a test cluster: a Server on a real socket.
type node struct {
	addr   string
	router *fakeRouter
	hits   atomic.Int64
}

// cluster starts one Server per address in addrs over a 6-partition
// ownership (partition p owned by addrs[p%len(addrs)]), every instance
// holding every movie in its store (as stale copies would), so that an
// answer from a wrong partition shows.
func cluster(t *testing.T, secret string, movies []engine.MovieStats, n int) []*node {
	t.Helper()
	lns := make([]net.Listener, n)
	nodes := make([]*node, n)
	owners := map[int32]string{}
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		nodes[i] = &node{addr: ln.Addr().String()}
	}
	for p := int32(0); p < 6; p++ {
		owners[p] = nodes[int(p)%n].addr
	}
	for i, nd := range nodes {
		nd.router = &fakeRouter{n: 6, self: nd.addr, owners: owners, local: newFake(movies...)}
		s := New(Options{Querier: nd.router.local, Router: nd.router, PeerSecret: []byte(secret)})
		h := s.Handler()
		counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			nd.hits.Add(1)
			h.ServeHTTP(w, r)
		})
		srv := &http.Server{Handler: counted, ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(lns[i]) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	return nodes
}

func someMovies(n int) []engine.MovieStats {
	out := make([]engine.MovieStats, n)
	for i := range out {
		id := int64(i + 1)
		out[i] = mv(id, id, float64(id*(id%10)))
	}
	return out
}

func getJSON(t *testing.T, url string, header http.Header) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	all, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, all
}

// TestRoutedGetAnswersFromTheOwner: every movie is answered by the
// instance owning it, whichever instance is asked.
func TestRoutedGetAnswersFromTheOwner(t *testing.T) {
	movies := someMovies(30)
	nodes := cluster(t, testSecret, movies, 2)
	for _, m := range movies {
		for _, nd := range nodes {
			code, _, body := getJSON(t, fmt.Sprintf("http://%s/movies/%d", nd.addr, m.MovieID), nil)
			var got movieJSON
			if code != http.StatusOK || json.Unmarshal(body, &got) != nil || got != toMovieJSON(m) {
				t.Fatalf("GET /movies/%d on %s = %d %s, want 200 %+v", m.MovieID, nd.addr, code, body, toMovieJSON(m))
			}
		}
	}
}

// TestForwardedHeaderIsAuthenticated: a client setting the forwarding
// header itself gets 401, never an unrouted answer from a copy the
// instance does not own; a peer's signed request is answered only for
// partitions running there; instances with different secrets refuse each
// other.
func TestForwardedHeaderIsAuthenticated(t *testing.T) {
	movies := someMovies(30)
	nodes := cluster(t, testSecret, movies, 2)
	a, b := nodes[0], nodes[1]
	var foreign engine.MovieStats // a movie owned by b
	for _, m := range movies {
		if a.router.ownerMap()[a.router.part(m.MovieID)] == b.addr {
			foreign = m
			break
		}
	}
	target := fmt.Sprintf("http://%s/movies/%d", a.addr, foreign.MovieID)
	signed := func(secret string, at time.Time) http.Header {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		newPeerAuth([]byte(secret)).sign(req, at)
		return req.Header
	}
	tests := []struct {
		name   string
		header http.Header
		want   int
	}{
		{"unsigned header", http.Header{ForwardedHeader: {"1"}}, http.StatusUnauthorized},
		{"wrong secret", signed("another-secret-0123456789", time.Now()), http.StatusUnauthorized},
		{"expired", signed(testSecret, time.Now().Add(-time.Hour)), http.StatusUnauthorized},
		{"garbage", http.Header{ForwardedHeader: {"t=1,s=zz"}}, http.StatusUnauthorized},
		{"signed, partition not here", signed(testSecret, time.Now()), http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := b.hits.Load()
			code, hdr, body := getJSON(t, target, tt.header)
			if code != tt.want {
				t.Fatalf("status %d (%s), want %d", code, body, tt.want)
			}
			if n := b.hits.Load() - before; n != 0 {
				t.Errorf("the owner got %d requests, want 0 (a forwarded request is never routed again)", n)
			}
			if code == http.StatusServiceUnavailable && hdr.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
		})
	}
	// A signed request for the instance's own partition is answered.
	own := movies[0]
	for _, m := range movies {
		if b.router.ownerMap()[b.router.part(m.MovieID)] == b.addr {
			own = m
			break
		}
	}
	req := httptest.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/movies/%d", b.addr, own.MovieID), nil)
	newPeerAuth([]byte(testSecret)).sign(req, time.Now())
	if code, _, body := getJSON(t, req.URL.String(), req.Header); code != http.StatusOK {
		t.Errorf("signed request for an own partition = %d %s, want 200", code, body)
	}

	// Instances that do not share the secret cannot route to each other.
	mixed := cluster(t, "", movies, 2)
	code, _, body := getJSON(t, fmt.Sprintf("http://%s/movies/%d", mixed[0].addr, foreign.MovieID), nil)
	if mixed[0].router.ownerMap()[mixed[0].router.part(foreign.MovieID)] != mixed[0].addr && code != http.StatusServiceUnavailable {
		t.Errorf("routing without a shared secret = %d %s, want 503", code, body)
	}
}

// TestLapsedLeaseAnswers503: an instance whose read lease has lapsed
// answers none of its own movies, whether asked by a client, by a peer
// routing a client's request, or by a signed forwarded request: 503 with
// Retry-After and a JSON error saying why, and the request is not routed
// on (the peer that forwarded it is not asked back).
func TestLapsedLeaseAnswers503(t *testing.T) {
	movies := someMovies(30)
	nodes := cluster(t, testSecret, movies, 2)
	a, b := nodes[0], nodes[1]
	var own engine.MovieStats // a movie of a's partitions
	for _, m := range movies {
		if a.router.ownerMap()[a.router.part(m.MovieID)] == a.addr {
			own = m
			break
		}
	}
	a.router.lapsed.Store(true)
	target := fmt.Sprintf("http://%s/movies/%d", a.addr, own.MovieID)
	req := httptest.NewRequest(http.MethodGet, target, nil)
	newPeerAuth([]byte(testSecret)).sign(req, time.Now())
	tests := []struct {
		name, url string
		header    http.Header
		wantA     int64 // requests a gets
	}{
		{"client asks a", target, nil, 1},
		{"client asks b, b routes to a", fmt.Sprintf("http://%s/movies/%d", b.addr, own.MovieID), nil, 1},
		{"signed forwarded request to a", target, req.Header, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			beforeA, beforeB := a.hits.Load(), b.hits.Load()
			code, hdr, body := getJSON(t, tt.url, tt.header)
			var e struct {
				Error string `json:"error"`
			}
			if code != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || e.Error == "" || hdr.Get("Retry-After") == "" {
				t.Fatalf("got %d %s (Retry-After %q), want 503 with a JSON error and Retry-After", code, body, hdr.Get("Retry-After"))
			}
			if got := a.hits.Load() - beforeA; got != tt.wantA {
				t.Errorf("a got %d requests, want %d", got, tt.wantA)
			}
			if tt.url == target && b.hits.Load() != beforeB {
				t.Errorf("b got %d requests; a with a lapsed lease must not route its own partition", b.hits.Load()-beforeB)
			}
		})
	}
	a.router.lapsed.Store(false)
	if code, _, body := getJSON(t, target, nil); code != http.StatusOK {
		t.Errorf("lease renewed: got %d %s, want 200", code, body)
	}
}

// TestMaliciousPeerAddress: an owner advertising something other than a
// bare host:port (the SSRF of issue 10) is never contacted.
func TestMaliciousPeerAddress(t *testing.T) {
	var internal atomic.Int64
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		internal.Add(1)
		fmt.Fprint(w, `{"movieId":9223372036854775807,"rating":1,"count":1,"secret":"internal admin answer"}`)
	}))
	defer admin.Close()
	host := strings.TrimPrefix(admin.URL, "http://")
	for _, evil := range []string{host + "/internal/admin?x=", "user@" + host, "http://" + host, host + "#x"} {
		t.Run(evil, func(t *testing.T) {
			r := &fakeRouter{n: 1, self: "127.0.0.1:1", owners: map[int32]string{0: evil}, local: newFake()}
			s := New(Options{Querier: r.local, Router: r, PeerSecret: []byte(testSecret)})
			rec := get(t, s.Handler(), "/movies/9223372036854775807")
			wantJSONError(t, rec, http.StatusServiceUnavailable)
			if strings.Contains(rec.Body.String(), "internal admin") {
				t.Errorf("answer reflects the internal service: %s", rec.Body.String())
			}
			rec = get(t, s.Handler(), "/movies?minAvg=0")
			if rec.Code != http.StatusServiceUnavailable {
				t.Errorf("range with the only partition on the evil member = %d %s, want 503", rec.Code, rec.Body.String())
			}
			if n := internal.Load(); n != 0 {
				t.Fatalf("the internal service got %d requests", n)
			}
		})
	}
}

// TestPeerAnswersAreValidated: a peer's answer is checked, never passed
// through: wrong movie, extra fields, movies outside the query or outside
// its partitions, oversized pages and redirects are refused.
func TestPeerAnswersAreValidated(t *testing.T) {
	answers := map[string]func(w http.ResponseWriter, r *http.Request){
		"wrong movie": func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"movieId":1,"rating":5,"count":1}`)
		},
		"extra field": func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"movieId":%s,"rating":5,"count":1,"x":"<script>"}`, strings.TrimPrefix(r.URL.Path, "/movies/"))
		},
		"redirect": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/internal", http.StatusFound)
		},
		"not json": func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "<html>") },
	}
	for name, h := range answers {
		t.Run(name, func(t *testing.T) {
			peer := httptest.NewServer(http.HandlerFunc(h))
			defer peer.Close()
			addr := strings.TrimPrefix(peer.URL, "http://")
			r := &fakeRouter{n: 1, self: "127.0.0.1:1", owners: map[int32]string{0: addr}, local: newFake()}
			s := New(Options{Querier: r.local, Router: r, PeerSecret: []byte(testSecret)})
			rec := get(t, s.Handler(), "/movies/77")
			wantJSONError(t, rec, http.StatusServiceUnavailable)
		})
	}

	// Range answers: a peer that lies costs its partitions, reported missing.
	rangeAnswers := map[string]string{
		"movie outside the bounds":   `{"movies":[{"movieId":5,"rating":1,"count":1}],"next":""}`,
		"movie of another partition": `{"movies":[{"movieId":%d,"rating":9,"count":1}],"next":""}`,
		"unknown field":              `{"movies":[],"next":"","admin":true}`,
		"zero count":                 `{"movies":[{"movieId":5,"rating":9,"count":0}],"next":""}`,
	}
	for name, body := range rangeAnswers {
		t.Run(name, func(t *testing.T) {
			r := &fakeRouter{n: 2, self: "127.0.0.1:1", local: newFake()}
			// A movie of partition 0 (the local one).
			var local int64 = 1
			for r.part(local) != 0 {
				local++
			}
			peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				w.Header().Set(PartitionsHeader, "1")
				fmt.Fprintf(w, body, local)
			}))
			defer peer.Close()
			r.setOwners(map[int32]string{0: r.self, 1: strings.TrimPrefix(peer.URL, "http://")})
			s := New(Options{Querier: r.local, Router: r, PeerSecret: []byte(testSecret)})
			rec := get(t, s.Handler(), "/movies?minAvg=8")
			page := decode[moviesPage](t, rec)
			if rec.Code != http.StatusOK || !page.Partial || fmt.Sprint(page.MissingPartitions) != "[1]" || len(page.Movies) != 0 {
				t.Errorf("got %d %+v, want 200, partial, missing [1], no movies", rec.Code, page)
			}
		})
	}
}

// TestRangeIsPartialWhenAnOwnerIsDown: the page holds what live owners
// answered, plus partial and the missing partitions; members owning
// nothing are not asked.
func TestRangeIsPartialWhenAnOwnerIsDown(t *testing.T) {
	movies := someMovies(60)
	nodes := cluster(t, testSecret, movies, 3)
	a := nodes[0]
	// Member 3 is dead: its partitions move to a closed port.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	owners := map[int32]string{}
	for p, addr := range a.router.ownerMap() {
		owners[p] = addr
		if addr == nodes[2].addr {
			owners[p] = deadAddr
		}
	}
	a.router.setOwners(owners)
	before := nodes[2].hits.Load()

	got := map[int64]bool{}
	after := ""
	pages := 0
	for {
		code, _, body := getJSON(t, "http://"+a.addr+"/movies?limit=7&after="+after, nil)
		var page moviesPage
		if code != http.StatusOK || json.Unmarshal(body, &page) != nil {
			t.Fatalf("page %d: %d %s, want 200", pages, code, body)
		}
		if !page.Partial || fmt.Sprint(page.MissingPartitions) != "[2 5]" {
			t.Fatalf("page %d: partial=%v missing=%v, want partial [2 5]", pages, page.Partial, page.MissingPartitions)
		}
		for _, m := range page.Movies {
			if got[m.MovieID] {
				t.Errorf("movie %d on two pages", m.MovieID)
			}
			got[m.MovieID] = true
		}
		pages++
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	for _, m := range movies {
		p := a.router.part(m.MovieID)
		if want := p%3 != 2; got[m.MovieID] != want {
			t.Errorf("movie %d (partition %d): returned=%v, want %v", m.MovieID, p, got[m.MovieID], want)
		}
	}
	if n := nodes[2].hits.Load() - before; n != 0 {
		t.Errorf("the member that owns nothing got %d requests, want 0", n)
	}

	// With every owner live the answer is complete and not partial.
	code, _, body := getJSON(t, "http://"+nodes[1].addr+"/movies?limit=1000", nil)
	var page moviesPage
	if code != http.StatusOK || json.Unmarshal(body, &page) != nil || page.Partial || len(page.Movies) != len(movies) {
		t.Errorf("all live: %d partial=%v %d movies, want 200, complete, %d", code, page.Partial, len(page.Movies), len(movies))
	}
	if strings.Contains(string(body), "partial") {
		t.Errorf("a complete answer mentions partial: %s", body)
	}
}
