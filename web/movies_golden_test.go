package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden answers in testdata")

// goldenAnswer is one recorded exchange: what a client sees of it.
type goldenAnswer struct {
	Name        string `json:"name"`
	Method      string `json:"method"`
	Target      string `json:"target"`
	Status      int    `json:"status"`
	ContentType string `json:"contentType,omitempty"`
	RetryAfter  string `json:"retryAfter,omitempty"`
	Partitions  string `json:"partitions,omitempty"`
	Body        string `json:"body"`
}

// goldenRecorder collects the answers of one test and compares them with
// testdata/golden/<file> (or rewrites it with -update).
type goldenRecorder struct {
	t   *testing.T
	got []goldenAnswer
}

func (g *goldenRecorder) add(name, method, target string, status int, h http.Header, body []byte) {
	g.got = append(g.got, goldenAnswer{Name: name, Method: method, Target: target, Status: status,
		ContentType: h.Get("Content-Type"), RetryAfter: h.Get("Retry-After"), Partitions: h.Get(PartitionsHeader), Body: string(body)})
}

// handler records method target on h.
func (g *goldenRecorder) handler(h http.Handler, name, method, target string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	g.add(name, method, target, rec.Code, rec.Header(), rec.Body.Bytes())
}

// socket records GET target on the instance at addr; shown is the target
// as recorded (without the instance's port).
func (g *goldenRecorder) socket(name, addr, shown, target string, header http.Header) {
	code, hdr, body := getJSON(g.t, "http://"+addr+target, header)
	g.add(name, http.MethodGet, shown, code, hdr, body)
}

func (g *goldenRecorder) check(file string) {
	t := g.t
	t.Helper()
	path := filepath.Join("testdata", "golden", file)
	if *updateGolden {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(g.got); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden answers (run with -update to write them): %v", err)
	}
	var want []goldenAnswer
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if len(g.got) != len(want) {
		t.Fatalf("%d answers, golden file has %d", len(g.got), len(want))
	}
	for i := range want {
		if g.got[i] != want[i] {
			t.Errorf("answer %d (%s):\n got %+v\nwant %+v", i, want[i].Name, g.got[i], want[i])
		}
	}
}

// goldenMovies holds ties (some across negative and positive ids), a
// negative id and the extremes of int64.
func goldenMovies() []movieStats {
	return []movieStats{
		mv(1, 2, 16), mv(2, 1, 9.5), mv(3, 4, 40), mv(4, 1, 8), mv(5, 3, 12), mv(6, 2, 17.5),
		mv(362, 2, 18), mv(7, 3, 25), mv(-4, 1, 2.5), mv(-9, 2, 16), mv(9223372036854775807, 1, 10),
		mv(-9223372036854775808, 1, 0.5), mv(11, 7, 70), mv(12, 9, 81.9),
	}
}

// goldenCursor is a next cursor of GET /movies as issued before GET /movies
// was served from the table path: position (avg 8, movie 1).
const goldenCursor = "AUAgAAAAAAAAAAAAAAAAAAHm95Il"

// TestMoviesGolden pins the exact answers of GET /movies/{id} and GET
// /movies on one instance over a shared store: bodies, status codes and
// the headers a client reads.
func TestMoviesGolden(t *testing.T) {
	g := &goldenRecorder{t: t}
	h := movieServer(t, goldenMovies(), nil)
	long := strings.Repeat("9", 80)
	gets := []string{
		"/movies/362", "/movies/7", "/movies/-4", "/movies/9223372036854775807", "/movies/-9223372036854775808",
		"/movies/363", "/movies/abc", "/movies/1.5", "/movies/9223372036854775808", "/movies/", "/movies/0x10",
		"/movies/%201", "/movies/1/2", "/movies/" + long, "/movies/%22%00%E2%9C%93",
		"/movies", "/movies?minAvg=8", "/movies?minAvg=8&maxAvg=9.5", "/movies?minAvg=8&maxAvg=8",
		"/movies?minAvg=8&limit=2", "/movies?minAvg=-3&limit=1000", "/movies?minAvg=10.5", "/movies?after=&limit=6",
		"/movies?limit=1", "/movies?limit=3&after=" + goldenCursor, "/movies?minAvg=0&maxAvg=8&limit=2&after=" + goldenCursor,
		"/movies?maxAvg=1", "/movies?maxAvg=-1", "/movies?minAvg=1e-3&maxAvg=7&limit=1000", "/movies?unknown=1&limit=2",
		"/movies?minAvg=abc", "/movies?minAvg=", "/movies?minAvg=NaN", "/movies?minAvg=Inf", "/movies?minAvg=-infinity",
		"/movies?maxAvg=%2BInf", "/movies?maxAvg=1e400", "/movies?maxAvg=ten", "/movies?minAvg=9&maxAvg=8",
		"/movies?minAvg=1&minAvg=2", "/movies?limit=0", "/movies?limit=-1", "/movies?limit=1001",
		"/movies?limit=99999999999999999999", "/movies?limit=1.5", "/movies?limit=ten", "/movies?limit=",
		"/movies?after=garbage", "/movies?after=" + goldenCursor[:len(goldenCursor)-1], "/movies?after=" + goldenCursor + "A",
		"/movies?after=" + goldenCursor + "&after=" + goldenCursor, "/movies?min%zzAvg=1", "/movies?minAvg=" + long,
		"/movies?index=avg&order=asc", "/movies/362?minAvg=1",
	}
	for _, target := range gets {
		g.handler(h, "single", http.MethodGet, target)
	}
	for _, target := range []string{"/movies/362", "/movies/363", "/movies/abc", "/movies?limit=2", "/movies?limit=0"} {
		g.handler(h, "single head", http.MethodHead, target)
	}
	without := movieServerWithout(t)
	for _, target := range []string{"/movies/1", "/movies", "/movies/abc", "/movies?limit=0"} {
		g.handler(without, "no movie job", http.MethodGet, target)
	}
	for _, e := range []error{
		fmt.Errorf("redis: dial tcp: refused: %w", engine.ErrUnavailable),
		fmt.Errorf("docstore: %w: sst checksum mismatch", engine.ErrCorrupt),
		fmt.Errorf("store: %w", engine.ErrLeaseLapsed),
		errors.New("bbolt: page 7 corrupt"),
	} {
		failing := movieServer(t, goldenMovies(), e)
		for _, target := range []string{"/movies/1", "/movies?minAvg=1"} {
			g.handler(failing, "store error", http.MethodGet, target)
		}
	}
	g.check("movies_single.json")
}

// firstOwned returns the first movie of ms whose partition nd's view of
// the ownership gives to addr.
func firstOwned(t *testing.T, nd *movieNode, ms []movieStats, addr string) int64 {
	t.Helper()
	for _, m := range ms {
		if nd.owners()[engine.PartitionFor(movies.Key(m.MovieID), 6)] == addr {
			return m.MovieID
		}
	}
	t.Fatalf("no movie owned by %s", addr)
	return 0
}

// clusterMovies are 40 movies over 6 partitions, with ties (some across
// negative and positive ids), in the order of GET /movies.
func clusterMovies() []movieStats {
	ms := append(someMovies(36), mv(-5, 1, 5), mv(-15, 2, 10), mv(-1, 3, 3), mv(-2, 1, 9.25))
	sort.Slice(ms, func(i, j int) bool { return cursorOf(ms[i]).Before(cursorOf(ms[j])) })
	return ms
}

// TestMoviesGoldenCluster pins the exact answers of the movie routes
// across instances: routed gets, merged pages and their cursors, signed
// forwarded requests as a peer sends them, and the answers while an owner
// is down or a read lease has lapsed.
func TestMoviesGoldenCluster(t *testing.T) {
	g := &goldenRecorder{t: t}
	ms := clusterMovies()
	nodes := movieCluster(t, testSecret, ms, 2)
	a, b := nodes[0], nodes[1]
	ownA, ownB := firstOwned(t, a, ms, a.addr), firstOwned(t, a, ms, b.addr)
	var ids []int64
	for _, m := range ms {
		ids = append(ids, m.MovieID)
	}
	for i, nd := range nodes {
		name := fmt.Sprintf("instance %d", i)
		for _, id := range append(ids, 999, -999) {
			target := fmt.Sprintf("/movies/%d", id)
			g.socket(name, nd.addr, target, target, nil)
		}
		for _, target := range []string{
			"/movies", "/movies?limit=7", "/movies?minAvg=5", "/movies?minAvg=5&maxAvg=5", "/movies?limit=1000",
			"/movies?maxAvg=-1", "/movies?minAvg=2&maxAvg=6&limit=4", "/movies?limit=0", "/movies?minAvg=x",
		} {
			g.socket(name, nd.addr, target, target, nil)
		}
		// Every page of a walk with tied averages.
		after := ""
		for page := 0; page < 20; page++ {
			target := "/movies?limit=6&after=" + after
			code, _, body := getJSON(t, "http://"+nd.addr+target, nil)
			g.socket(name+" walk", nd.addr, target, target, nil)
			var p moviesPage
			if code != http.StatusOK || json.Unmarshal(body, &p) != nil {
				t.Fatalf("walk: %d %s", code, body)
			}
			if p.Next == "" {
				break
			}
			after = p.Next
		}
	}

	signed := func(target string) http.Header {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		SignForwarded(req, []byte(testSecret))
		return req.Header
	}
	for i, nd := range nodes {
		name := fmt.Sprintf("signed to instance %d", i)
		for _, target := range []string{
			"/movies?limit=5", "/movies?minAvg=3&maxAvg=7&limit=1000", "/movies?limit=4&after=" + goldenCursor,
			fmt.Sprintf("/movies/%d", ownA), fmt.Sprintf("/movies/%d", ownB), "/movies/999",
		} {
			g.socket(name, nd.addr, target, target, signed(target))
		}
		g.socket("unsigned forwarded header", nd.addr, "/movies?limit=2", "/movies?limit=2", http.Header{ForwardedHeader: {"1"}})
		target := fmt.Sprintf("/movies/%d", ownB)
		g.socket("unsigned forwarded header", nd.addr, target, target, http.Header{ForwardedHeader: {"1"}})
	}

	// a's read lease lapses: its own movies answer 503, b's still answer.
	a.lapse(true)
	for i, nd := range nodes {
		for _, id := range []int64{ownA, ownB} {
			target := fmt.Sprintf("/movies/%d", id)
			g.socket(fmt.Sprintf("lapsed lease, instance %d", i), nd.addr, target, target, nil)
		}
	}
	a.lapse(false)

	// b goes down as a sees it: its partitions move to a closed port.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	owners := map[int32]string{}
	for p, addr := range a.owners() {
		owners[p] = addr
		if addr == b.addr {
			owners[p] = deadAddr
		}
	}
	a.setOwners(owners)
	for _, target := range []string{
		"/movies", "/movies?limit=3", "/movies?limit=3&after=" + goldenCursor, "/movies?minAvg=9",
		fmt.Sprintf("/movies/%d", ownA), fmt.Sprintf("/movies/%d", ownB),
	} {
		g.socket("owner down", a.addr, target, target, nil)
	}
	// Every partition on the dead instance: nothing can be answered.
	for p := range owners {
		owners[p] = deadAddr
	}
	a.setOwners(owners)
	for _, target := range []string{"/movies", fmt.Sprintf("/movies/%d", ownA)} {
		g.socket("all owners down", a.addr, target, target, nil)
	}
	g.check("movies_cluster.json")
}
