package bench_test

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app/bench"
	"github.com/keepstate/keepstate/avro"
)

// drain returns every rating of w.
func drain(w bench.Workload) []avro.Rating {
	var out []avro.Rating
	next := w.Generator()
	for r, ok := next(); ok; r, ok = next() {
		out = append(out, r)
	}
	return out
}

func TestWorkloadGenerator(t *testing.T) {
	for _, dist := range []string{bench.DistZipf, bench.DistUniform, bench.DistFill} {
		t.Run(dist, func(t *testing.T) {
			w := bench.Workload{Dist: dist, Movies: 500, Ratings: 5000, Seed: 7}
			if err := w.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			a, b := drain(w), drain(w)
			if int64(len(a)) != w.Len() {
				t.Fatalf("got %d ratings, want Len() = %d", len(a), w.Len())
			}
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("rating %d differs between two runs with one seed: %+v vs %+v", i, a[i], b[i])
				}
			}
			seen := map[int64]int{}
			for i, r := range a {
				if r.MovieID < 1 || r.MovieID > w.Movies {
					t.Fatalf("rating %d: movie %d outside 1..%d", i, r.MovieID, w.Movies)
				}
				if r.Rating < 0 || r.Rating > 10 || r.Rating*2 != math.Trunc(r.Rating*2) {
					t.Fatalf("rating %d: value %v is not a multiple of 0.5 in 0..10", i, r.Rating)
				}
				seen[r.MovieID]++
			}
			switch dist {
			case bench.DistFill:
				if len(seen) != int(w.Movies) {
					t.Errorf("fill rated %d distinct movies, want %d", len(seen), w.Movies)
				}
			case bench.DistZipf:
				if seen[1] < 10*seen[250] {
					t.Errorf("zipf: movie 1 has %d ratings, movie 250 %d: want a strong skew", seen[1], seen[250])
				}
			case bench.DistUniform:
				if seen[1] > 3*seen[250]+10 {
					t.Errorf("uniform: movie 1 has %d ratings, movie 250 %d: want no skew", seen[1], seen[250])
				}
			}
			other := w
			other.Seed++
			if c := drain(other); dist != bench.DistFill && c[0] == a[0] && c[1] == a[1] && c[2] == a[2] {
				t.Errorf("seeds %d and %d start alike: %+v", w.Seed, other.Seed, c[:3])
			}
		})
	}
}

func TestWorkloadValidate(t *testing.T) {
	for _, w := range []bench.Workload{
		{Dist: "pareto", Movies: 10, Ratings: 10},
		{Dist: bench.DistZipf, Movies: 1, Ratings: 10},
		{Dist: bench.DistUniform, Movies: 10, Ratings: 0},
	} {
		if err := w.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", w)
		}
	}
}

func TestTruthCheck(t *testing.T) {
	truth := bench.NewTruth()
	for _, r := range []avro.Rating{{MovieID: 1, Rating: 10}, {MovieID: 1, Rating: 8}, {MovieID: 2, Rating: 0.5}} {
		truth.Add(r)
	}
	exact := []bench.Observed{{MovieID: 1, Count: 2, Avg: 9}, {MovieID: 2, Count: 1, Avg: 0.5}}
	tests := []struct {
		name                         string
		obs                          []bench.Observed
		ok                           bool
		exact, wrong, missing, extra int
	}{
		{"exact", exact, true, 2, 0, 0, 0},
		{"average only", []bench.Observed{{MovieID: 1, Count: -1, Avg: 9}, {MovieID: 2, Count: -1, Avg: 0.5}}, true, 2, 0, 0, 0},
		{"count off by one", []bench.Observed{{MovieID: 1, Count: 3, Avg: 9}, exact[1]}, false, 1, 1, 0, 0},
		{"average off", []bench.Observed{{MovieID: 1, Count: 2, Avg: 9.000000001}, exact[1]}, false, 1, 1, 0, 0},
		{"missing", exact[:1], false, 1, 0, 1, 0},
		{"extra movie", append([]bench.Observed{{MovieID: 3, Count: 1, Avg: 1}}, exact...), false, 2, 0, 0, 1},
		{"twice", append([]bench.Observed{exact[0]}, exact...), false, 2, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := truth.Check(tt.obs)
			if r.OK() != tt.ok || r.Exact != tt.exact || r.Wrong != tt.wrong || r.Missing != tt.missing || r.Extra != tt.extra {
				t.Errorf("Check = %+v (OK %v), want OK %v exact %d wrong %d missing %d extra %d",
					r, r.OK(), tt.ok, tt.exact, tt.wrong, tt.missing, tt.extra)
			}
			if !tt.ok && !strings.Contains(r.String(), "e.g. movie") {
				t.Errorf("String() = %q, want an example of a difference", r.String())
			}
		})
	}
	if id, m := truth.MostRated(); id != 1 || m.Count != 2 || m.Avg() != 9 {
		t.Errorf("MostRated() = %d %+v, want movie 1 with count 2 avg 9", id, m)
	}
	if truth.Movies() != 2 || truth.Ratings() != 3 {
		t.Errorf("Movies(), Ratings() = %d, %d; want 2, 3", truth.Movies(), truth.Ratings())
	}
}

func TestReadProcUsage(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: not Linux")
	}
	u, err := bench.ReadProcUsage(os.Getpid())
	if err != nil {
		t.Fatalf("ReadProcUsage(self) = %v", err)
	}
	if u.PeakRSS <= 0 || u.RSS <= 0 || u.PeakRSS < u.RSS {
		t.Errorf("ReadProcUsage(self) = %+v, want 0 < RSS <= PeakRSS", u)
	}
}

func TestCollectCPUProfile(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	bare := httptest.NewServer(http.NotFoundHandler())
	defer bare.Close()

	path := filepath.Join(t.TempDir(), "cpu.prof")
	if err := bench.CollectCPUProfile(context.Background(), srv.URL, time.Second, path); err != nil {
		t.Fatalf("CollectCPUProfile(pprof server) = %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Errorf("profile file %s: %v, size %v; want a non-empty profile", path, err, fi)
	}
	err := bench.CollectCPUProfile(context.Background(), bare.URL, time.Second, filepath.Join(t.TempDir(), "none.prof"))
	if !errors.Is(err, bench.ErrNoProfiler) {
		t.Errorf("CollectCPUProfile(no pprof) = %v, want ErrNoProfiler", err)
	}
}

// TestCollectCPUProfileWaitsForTheListener: the bench asks a child for its
// profile right after starting it, before the child listens.
func TestCollectCPUProfileWaitsForTheListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: connections are refused

	path := filepath.Join(t.TempDir(), "cpu.prof")
	done := make(chan error, 1)
	go func() { done <- bench.CollectCPUProfile(context.Background(), "http://"+addr, time.Second, path) }()

	// The injected fault: the listener comes up 300 ms late, as a child
	// process's does (this delay is the scenario, not a synchronisation:
	// the result is awaited on done).
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux}
	defer srv.Close()
	listenErr := make(chan error, 1)
	time.AfterFunc(300*time.Millisecond, func() {
		l, err := net.Listen("tcp", addr)
		listenErr <- err
		if err == nil {
			go srv.Serve(l)
		}
	})
	if err := <-listenErr; err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("CollectCPUProfile(late listener) = %v, want it to wait and succeed", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Errorf("profile file %s: %v; want a non-empty profile", path, err)
	}
}
