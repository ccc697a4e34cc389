package web

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const testSecret = "test-peer-secret-0123456789"

// routedFake returns a movie table of n partitions with the given
// ownership, answered here for the partitions of 127.0.0.1:1.
func routedFake(t *testing.T, n int32, owners map[int32]string, ms ...movieStats) *movieFake {
	t.Helper()
	f, err := newMovieFake(n, ms)
	if err != nil {
		t.Fatal(err)
	}
	f.setOwners("127.0.0.1:1", owners)
	return f
}

func toMovieJSON(m movieStats) movieJSON {
	return movieJSON{MovieID: m.MovieID, Rating: m.Avg(), Count: m.Count}
}

// node is one instance of a test cluster: a Server on a real socket.
type node struct {
	addr   string
	movies *movieFake
	hits   atomic.Int64
}

// owner returns the owner of movie id as nd sees it.
func (nd *node) owner(id int64) string {
	_, owners := nd.movies.ownership()
	return owners[nd.movies.part(id)]
}

// cluster starts one Server per address in addrs over a 6-partition
// ownership (partition p owned by addrs[p%len(addrs)]), every instance
// holding every movie in its store (as stale copies would), so that an
// answer from a wrong partition shows.
func cluster(t *testing.T, secret string, movies []movieStats, n int) []*node {
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
		f, err := newMovieFake(6, movies)
		if err != nil {
			t.Fatal(err)
		}
		f.setOwners(nd.addr, owners)
		nd.movies = f
		s := New(Options{Tables: []Table{f}, PeerSecret: []byte(secret)})
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

func someMovies(n int) []movieStats {
	out := make([]movieStats, n)
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
	var foreign movieStats // a movie owned by b
	for _, m := range movies {
		if a.owner(m.MovieID) == b.addr {
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
		if b.owner(m.MovieID) == b.addr {
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
	if mixed[0].owner(foreign.MovieID) != mixed[0].addr && code != http.StatusServiceUnavailable {
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
	var own movieStats // a movie of a's partitions
	for _, m := range movies {
		if a.owner(m.MovieID) == a.addr {
			own = m
			break
		}
	}
	a.movies.lapsed.Store(true)
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
	a.movies.lapsed.Store(false)
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
			f := routedFake(t, 1, map[int32]string{0: evil})
			s := New(Options{Tables: []Table{f}, PeerSecret: []byte(testSecret)})
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

// movieDocJSON is a document of the movie table as a peer sends it.
func movieDocJSON(id int64, partition int32, count int64, sum, avg float64, extra string) string {
	return fmt.Sprintf(`{"table":"movies","key":"%d","partition":%d,"version":1,"value":{"count":%d,"sum":%v},"index":{"avg":%v}%s}`,
		id, partition, count, sum, avg, extra)
}

// TestPeerAnswersAreValidated: a peer's answer is checked, never passed
// through: wrong movie, extra fields, movies that are not movies, movies
// outside the query or outside its partitions, redirects and other
// bodies are refused.
func TestPeerAnswersAreValidated(t *testing.T) {
	answers := map[string]string{
		"wrong movie":   movieDocJSON(1, 0, 1, 5, 5, ""),
		"extra field":   movieDocJSON(77, 0, 1, 5, 5, `,"x":"<script>"`),
		"zero count":    movieDocJSON(77, 0, 0, 0, 5, ""),
		"no count":      `{"table":"movies","key":"77","partition":0,"version":1,"value":{"sum":5},"index":{"avg":5}}`,
		"another table": strings.Replace(movieDocJSON(77, 0, 1, 5, 5, ""), `"movies"`, `"ratings"`, 1),
		"movie answer":  `{"movieId":77,"rating":5,"count":1}`,
		"not json":      "<html>",
	}
	for name, body := range answers {
		t.Run(name, func(t *testing.T) {
			peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) }))
			defer peer.Close()
			f := routedFake(t, 1, map[int32]string{0: strings.TrimPrefix(peer.URL, "http://")})
			s := New(Options{Tables: []Table{f}, PeerSecret: []byte(testSecret)})
			wantJSONError(t, get(t, s.Handler(), "/movies/77"), http.StatusServiceUnavailable)
		})
	}
	t.Run("redirect", func(t *testing.T) {
		peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/internal", http.StatusFound)
		}))
		defer peer.Close()
		f := routedFake(t, 1, map[int32]string{0: strings.TrimPrefix(peer.URL, "http://")})
		s := New(Options{Tables: []Table{f}, PeerSecret: []byte(testSecret)})
		wantJSONError(t, get(t, s.Handler(), "/movies/77"), http.StatusServiceUnavailable)
	})

	// Range answers: a peer that lies costs its partitions, reported missing.
	f := routedFake(t, 2, nil)
	var local int64 = 1 // a movie of partition 0 (the local one)
	for f.part(local) != 0 {
		local++
	}
	var remote int64 = 1 // a movie of partition 1 (the peer's)
	for f.part(remote) != 1 {
		remote++
	}
	page := func(items ...string) string {
		return `{"table":"movies","index":"avg","items":[` + strings.Join(items, ",") + `],"next":""}`
	}
	rangeAnswers := map[string]string{
		"movie outside the bounds":   page(movieDocJSON(remote, 1, 1, 1, 1, "")),
		"movie of another partition": page(movieDocJSON(local, 1, 1, 9, 9, "")),
		"unknown field":              `{"table":"movies","index":"avg","items":[],"next":"","admin":true}`,
		"zero count":                 page(movieDocJSON(remote, 1, 0, 0, 9, "")),
	}
	for name, body := range rangeAnswers {
		t.Run(name, func(t *testing.T) {
			peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				w.Header().Set(PartitionsHeader, "1")
				fmt.Fprint(w, body)
			}))
			defer peer.Close()
			f := routedFake(t, 2, map[int32]string{0: "127.0.0.1:1", 1: strings.TrimPrefix(peer.URL, "http://")})
			s := New(Options{Tables: []Table{f}, PeerSecret: []byte(testSecret)})
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
	_, current := a.movies.ownership()
	for p, addr := range current {
		owners[p] = addr
		if addr == nodes[2].addr {
			owners[p] = deadAddr
		}
	}
	a.movies.setOwners(a.addr, owners)
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
		p := a.movies.part(m.MovieID)
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

// TestMovieTableOrderAcrossInstances: the movie table merged across
// instances keeps its stores' order, ties by the key's bytes (negative ids
// after the others), whole and page by page.
func TestMovieTableOrderAcrossInstances(t *testing.T) {
	ms := clusterMovies()
	var want []string
	for _, m := range ms {
		want = append(want, strconv.FormatInt(m.MovieID, 10))
	}
	for _, nd := range movieCluster(t, testSecret, ms, 2) {
		for _, limit := range []int{1000, 3} {
			var got []string
			after := ""
			for range len(ms) + 1 {
				target := fmt.Sprintf("http://%s/tables/movies?index=avg&order=desc&limit=%d&after=%s", nd.addr, limit, after)
				code, _, body := getJSON(t, target, nil)
				var page pageOut
				if code != http.StatusOK || json.Unmarshal(body, &page) != nil || page.Partial {
					t.Fatalf("GET %s = %d %s", target, code, body)
				}
				for _, it := range page.Items {
					got = append(got, it.Key)
				}
				if after = page.Next; after == "" {
					break
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("instance %s, limit %d: keys %v, want %v", nd.addr, limit, got, want)
			}
		}
	}
}
