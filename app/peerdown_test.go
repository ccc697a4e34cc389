package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/web"
)

// ownPartitions asks the instance at api, as a peer would, which
// partitions it answers for.
func ownPartitions(api string) ([]int32, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+api+"/movies?limit=1", nil)
	if err != nil {
		return nil, err
	}
	web.SignForwarded(req, []byte(testPeerSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("signed range: %d", resp.StatusCode)
	}
	var out []int32
	for _, s := range strings.Split(resp.Header.Get(web.PartitionsHeader), ",") {
		if s == "" {
			continue
		}
		p, err := strconv.Atoi(s)
		if err != nil {
			return nil, err
		}
		out = append(out, int32(p))
	}
	return out, nil
}

// replicaMovie asks the instance at api, as a peer would, for movie id
// from whatever copy it holds (its active or its standby).
func replicaMovie(api string, id int64) (testkit.Movie, int, error) {
	var m testkit.Movie
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/movies/%d?replica=1", api, id), nil)
	if err != nil {
		return m, 0, err
	}
	web.SignForwarded(req, []byte(testPeerSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, resp.StatusCode, nil
	}
	return m, resp.StatusCode, json.NewDecoder(resp.Body).Decode(&m)
}

// rangePage is the body of GET /movies.
type rangePage struct {
	Movies            []testkit.Movie `json:"movies"`
	Next              string          `json:"next"`
	Partial           bool            `json:"partial"`
	MissingPartitions []int32         `json:"missingPartitions"`
	StalePartitions   []int32         `json:"stalePartitions"`
}

// staleSeen counts range pages that listed stale partitions (answered
// from standby copies), across pagedRange calls.
var staleSeen atomic.Int64

// pagedRange pages through GET /movies on api; it returns every movie, and
// whether any page was partial (with the union of missing partitions).
func pagedRange(api string) (map[int64]testkit.Movie, map[int32]bool, error) {
	out := map[int64]testkit.Movie{}
	missing := map[int32]bool{}
	after := ""
	for {
		var page rangePage
		code, err := testkit.GetJSON("http://"+api+"/movies?limit=1000&after="+url.QueryEscape(after), &page)
		if err != nil || code != http.StatusOK {
			return nil, nil, fmt.Errorf("GET /movies: %d %v", code, err)
		}
		for _, m := range page.Movies {
			out[m.MovieID] = m
		}
		for _, p := range page.MissingPartitions {
			missing[p] = true
		}
		if len(page.StalePartitions) > 0 {
			staleSeen.Add(1)
		}
		if page.Partial != (len(page.MissingPartitions) > 0) {
			return nil, nil, fmt.Errorf("partial=%v with missing %v", page.Partial, page.MissingPartitions)
		}
		if page.Next == "" {
			return out, missing, nil
		}
		after = page.Next
	}
}

// TestE2EPeerKilledQueriesSurvive kills one of two instances with SIGKILL.
// Until the group notices (the session timeout), the survivor must keep
// answering range queries with 200, every movie it returns exact, and every
// key lookup of its own partitions with 200 and the exact value; afterwards
// it answers everything. Without standbys its range answers are "partial"
// meanwhile; with them (the default) they are complete, the killed
// instance's partitions answered from the survivor's standby copies and
// listed as stale.
func TestE2EPeerKilledQueriesSurvive(t *testing.T) {
	for _, standbys := range []int{0, 1} {
		t.Run(fmt.Sprintf("standbys=%d", standbys), func(t *testing.T) { runPeerKilled(t, standbys) })
	}
}

func runPeerKilled(t *testing.T, standbys int) {
	const sessionTimeout = 6 * time.Second
	cc := newChildCluster(t)
	a, b := cc.newInstance("a", false), cc.newInstance("b", false)
	for _, in := range []*crashInstance{a, b} {
		in.extraArgs = []string{"--session-timeout", sessionTimeout.String(), "--standby-replicas", fmt.Sprint(standbys)}
		cc.start(in)
	}
	cc.waitReady(a, 60*time.Second)
	cc.waitReady(b, 60*time.Second)

	p := produceConfig(cc.cfg, 3000, 300, 5)
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	truthOf(p, truth, sums)
	if _, err := app.Produce(context.Background(), p, nil); err != nil {
		t.Fatalf("produce: %v", err)
	}
	var ownA []int32
	testkit.Eventually(t, 60*time.Second, "both instances own partitions and answer everything", func() error {
		got, missing, err := pagedRange(a.api)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return fmt.Errorf("missing partitions %v", missing)
		}
		if err := sameMovies(got, truth); err != nil {
			return err
		}
		if ownA, err = ownPartitions(a.api); err != nil {
			return err
		}
		if len(ownA) == 0 || len(ownA) == 3 {
			return fmt.Errorf("a owns %v, want some but not all of 3", ownA)
		}
		return nil
	})
	isA := map[int32]bool{}
	for _, p := range ownA {
		isA[p] = true
	}
	var idsA []int64
	for id := range truth {
		if isA[engine.PartitionFor(engine.Int64Keys.Append(nil, id), 3)] {
			idsA = append(idsA, id)
		}
	}

	if standbys > 0 {
		testkit.Eventually(t, 30*time.Second, "a keeps standbys of b's partitions", func() error {
			st, err := stats(a.api)
			if err == nil && st.Stats.PartitionsStandby != int64(3-len(ownA)) {
				err = fmt.Errorf("a keeps %d standbys", st.Stats.PartitionsStandby)
			}
			return err
		})
		// A standby answers within the acceptable lag, marked stale; the
		// exact answers asked of it below need its copy to have read
		// every rating first.
		testkit.Eventually(t, 30*time.Second, "a's standby copies hold every movie of b's partitions", func() error {
			for id, w := range truth {
				if isA[engine.PartitionFor(engine.Int64Keys.Append(nil, id), 3)] {
					continue
				}
				m, code, err := replicaMovie(a.api, id)
				if err != nil || code != http.StatusOK || m != w {
					return fmt.Errorf("standby copy of movie %d = %d %+v %v, want %+v", id, code, m, err, w)
				}
			}
			return nil
		})
	}
	staleSeen.Store(0)
	b.proc.Kill()
	killed := time.Now()
	var ranges, lookups, partials int
	for i := 0; time.Since(killed) < sessionTimeout+3*time.Second; i++ {
		got, missing, err := pagedRange(a.api)
		if err != nil {
			t.Fatalf("%v after the kill: range query failed: %v", time.Since(killed).Round(time.Millisecond), err)
		}
		ranges++
		if len(missing) > 0 {
			partials++
		}
		for id, m := range got {
			if truth[id] != m {
				t.Fatalf("range returned %+v, truth %+v", m, truth[id])
			}
			if missing[engine.PartitionFor(engine.Int64Keys.Append(nil, id), 3)] {
				t.Errorf("movie %d returned although its partition is reported missing", id)
			}
		}
		for j := 0; j < 20; j++ {
			id := idsA[(i*20+j)%len(idsA)]
			m, code, err := getMovie("http://"+a.api, id)
			if err != nil || code != http.StatusOK {
				t.Fatalf("%v after the kill: own movie %d = %d %v, want 200", time.Since(killed).Round(time.Millisecond), id, code, err)
			}
			w := truth[id]
			if m.MovieID != w.MovieID || m.Count != w.Count || m.Rating != w.Rating {
				t.Fatalf("own movie %d = %+v, truth %+v", id, m, w)
			}
			lookups++
		}
	}
	t.Logf("after the kill: %d range queries (%d partial, %d pages with stale partitions), %d key lookups, all 200", ranges, partials, staleSeen.Load(), lookups)
	switch {
	case standbys == 0 && partials == 0:
		t.Errorf("no range answer was partial while the killed instance still held its partitions")
	case standbys > 0 && partials > 0:
		t.Errorf("%d range answers were partial although a keeps standbys of every partition of b", partials)
	case standbys > 0 && staleSeen.Load() == 0:
		t.Errorf("no range answer listed stale partitions while the killed instance still held its partitions")
	}
	testkit.Eventually(t, 60*time.Second, "the survivor answers everything", func() error {
		got, missing, err := pagedRange(a.api)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return fmt.Errorf("missing %v", missing)
		}
		return sameMovies(got, truth)
	})
}
