package app_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/web"
)

// TestE2EWokenInstanceNeverStale: instance b is stopped (SIGSTOP) past its
// session timeout, a takes its partitions, and ratings change the counts
// of movies b used to own. From the moment b is resumed (SIGCONT) it is
// asked, every 10 ms for 10 s, for those movies by key (GET /movies/{id}
// and GET /tables/movies/{id}) and by range (GET /movies). No 200 may be
// behind the truth: each answer is exact (from b's store once it owns the
// key again, or routed to a), a range page that leaves out the partitions
// it cannot answer (partial), or a 503 with Retry-After and a JSON error.
// Without the read lease b answers from its stopped-in-time copy as if it
// were current until it notices that the group went on without it.
func TestE2EWokenInstanceNeverStale(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a session timeout")
	}
	for _, store := range []string{app.StoreClover, app.StoreRedis} {
		t.Run(store, func(t *testing.T) { wokenNeverStale(t, store) })
	}
}

func wokenNeverStale(t *testing.T, store string) {
	const movies, chunk = 300, 3000
	cc := newChildCluster(t)
	if store == app.StoreRedis {
		useRedis(t, &cc.cfg)
	}
	c := cc.cfg
	a, b := cc.newInstance("a", true), cc.newInstance("b", true)
	for _, in := range []*crashInstance{a, b} {
		cc.start(in)
	}
	for _, in := range []*crashInstance{a, b} {
		cc.waitReady(in, 60*time.Second)
	}
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	produce := func(seed uint64) {
		t.Helper()
		p := produceConfig(c, chunk, movies, seed)
		if n, err := app.Produce(t.Context(), p, nil); err != nil || n != chunk {
			t.Fatalf("produce: %d ratings, %v; want %d", n, err, chunk)
		}
		truthOf(p, truth, sums)
	}
	produce(1)
	waitAllExact(t, a.api, truth)
	testkit.Eventually(t, 30*time.Second, "b runs partitions", func() error {
		st, err := stats(b.api)
		if err == nil && st.Stats.PartitionsRunning == 0 {
			err = errors.New("b runs no partition")
		}
		return err
	})
	// On clover, the movies b ran; on Redis b answers every movie from the
	// shared store, so any changed movie will do.
	owned := []int32{0, 1, 2}
	if store == app.StoreClover {
		var err error
		if owned, err = ownPartitions(b.api); err != nil || len(owned) == 0 {
			t.Fatalf("b owns partitions %v (%v); the test needs some", owned, err)
		}
	}
	before := map[int64]testkit.Movie{}
	for id, m := range truth {
		before[id] = m
	}

	// Stop b until a runs everything, then change the counts.
	if err := b.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP b: %v", err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = b.proc.Signal(syscall.SIGCONT)
		}
	}()
	testkit.Eventually(t, 60*time.Second, "a runs every partition", func() error {
		st, err := stats(a.api)
		if err == nil && st.Stats.PartitionsRunning != 3 {
			err = fmt.Errorf("a runs %d partitions", st.Stats.PartitionsRunning)
		}
		return err
	})
	produce(2)
	waitAllExact(t, a.api, truth)
	var changed []int64 // movies of b's former partitions whose count changed
	for id, m := range truth {
		if m != before[id] && slices.Contains(owned, engine.PartitionFor(engine.Int64Keys.Append(nil, id), 3)) {
			changed = append(changed, id)
		}
	}
	if len(changed) < 10 {
		t.Fatalf("%d movies of b's partitions changed during the pause; the test needs more", len(changed))
	}

	stopped = false
	if err := b.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT b: %v", err)
	}
	var n answers
	for i, end := 0, time.Now().Add(10*time.Second); time.Now().Before(end); i++ {
		id := changed[i%len(changed)]
		switch i % 3 {
		case 0:
			n.check(t, "GET /movies/"+strconv.FormatInt(id, 10), b.api, func(body []byte, marked bool) error {
				var m testkit.Movie
				if err := json.Unmarshal(body, &m); err != nil {
					return err
				}
				if marked {
					return pastMovie(m, truth[id], before[id])
				}
				return sameMovie(m, truth[id], before[id])
			})
		case 1:
			n.check(t, "GET /tables/movies/"+strconv.FormatInt(id, 10), b.api, func(body []byte, marked bool) error {
				var d struct {
					Value struct {
						Count int64   `json:"count"`
						Sum   float64 `json:"sum"`
					} `json:"value"`
				}
				if err := json.Unmarshal(body, &d); err != nil {
					return err
				}
				m := testkit.Movie{MovieID: id, Count: d.Value.Count, Rating: d.Value.Sum / float64(d.Value.Count)}
				if marked {
					return pastMovie(m, truth[id], before[id])
				}
				return sameMovie(m, truth[id], before[id])
			})
		default:
			n.check(t, "GET /movies?limit=1000", b.api, func(body []byte, _ bool) error {
				var page struct {
					Movies          []testkit.Movie `json:"movies"`
					Partial         bool            `json:"partial"`
					StalePartitions []int32         `json:"stalePartitions"`
				}
				if err := json.Unmarshal(body, &page); err != nil {
					return err
				}
				for _, m := range page.Movies {
					check := sameMovie
					if slices.Contains(page.StalePartitions, engine.PartitionFor(engine.Int64Keys.Append(nil, m.MovieID), 3)) {
						check = pastMovie
					}
					if err := check(m, truth[m.MovieID], before[m.MovieID]); err != nil {
						return err
					}
				}
				if !page.Partial && len(page.Movies) != len(truth) {
					return fmt.Errorf("a complete page of %d movies, want %d", len(page.Movies), len(truth))
				}
				return nil
			})
		}
		time.Sleep(10 * time.Millisecond) // the pace, not synchronisation
	}
	t.Logf("%s: %d changed movies asked on b for 10 s from SIGCONT: %d exact answers, %d marked stale, %d partial range pages, %d answered 503",
		store, len(changed), n.ok, n.stale, n.partial, n.unavailable)
	if n.ok == 0 {
		t.Errorf("b never answered exactly in 10 s after waking; want it to rejoin or route")
	}
	cc.waitReady(b, 60*time.Second)
	waitAllExact(t, b.api, truth)
	if st, err := stats(b.api); store == app.StoreClover && (err != nil || st.Stats.ReadLeaseLapses < 1) {
		t.Errorf("b's readLeaseLapses after waking: %d (%v); want at least 1", st.Stats.ReadLeaseLapses, err)
	}
}

// answers counts the outcomes of the queries of wokenNeverStale.
type answers struct{ ok, partial, stale, unavailable int }

// check sends GET path to api and fails the test on any answer that is
// neither a 200 passing valid nor a 503 with Retry-After and a JSON error.
// valid is told whether the answer is marked as a copy's (stale).
func (n *answers) check(t *testing.T, path, api string, valid func(body []byte, marked bool) error) {
	t.Helper()
	resp, err := http.Get("http://" + api + strings.TrimPrefix(path, "GET "))
	if err != nil {
		t.Fatalf("%s on b: %v", path, err)
	}
	defer resp.Body.Close()
	var body []byte
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s on b: reading the answer: %v", path, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		marked := resp.Header.Get(web.ReplicaHeader) != ""
		if err := valid(body, marked); err != nil {
			t.Fatalf("%s on b answered 200 (marked stale: %v) behind the truth: %v", path, marked, err)
		}
		switch {
		case strings.Contains(string(body), `"partial":true`):
			n.partial++
		case marked || strings.Contains(string(body), `"stalePartitions"`):
			n.stale++
		default:
			n.ok++
		}
	case http.StatusServiceUnavailable:
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error == "" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s on b: 503 without a JSON error and Retry-After: %q, Retry-After %q", path, body, resp.Header.Get("Retry-After"))
		}
		n.unavailable++
	default:
		t.Fatalf("%s on b: status %d %s; want 200 or 503", path, resp.StatusCode, body)
	}
}

// pastMovie returns nil when got is a state movie want went through since
// before (counts only grow): what a copy marked stale may answer.
func pastMovie(got, want, before testkit.Movie) error {
	if got.MovieID != want.MovieID || got.Count < before.Count || got.Count > want.Count ||
		(got.Count == want.Count && got != want) || (got.Count == before.Count && got != before) {
		return fmt.Errorf("movie %d: got %+v, not a state between %+v and %+v", want.MovieID, got, before, want)
	}
	return nil
}

// sameMovie returns nil when got is want exactly (ratings are multiples of
// 0.5, so sums do not depend on their order); otherwise an error saying
// whether got is the value from before the pause (a stale answer).
func sameMovie(got, want, before testkit.Movie) error {
	if got != want {
		stale := ""
		if got.Count == before.Count {
			stale = " (the count from before the pause)"
		}
		return fmt.Errorf("movie %d: got %+v, want %+v%s", want.MovieID, got, want, stale)
	}
	return nil
}
