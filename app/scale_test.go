package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/movies"
)

// prober asks every watched instance for one key of every partition, and
// for a range of movies, every 100 ms, each in its own loop (a slow answer
// delays no other probe), and records per instance and key the longest
// time without a 200 (counted from when the instance was watched), and the range answers that came back partial. Given
// the probe ratings sent (expect), it also records per key how long the
// first answer counting one took: how long processing stalled.
type prober struct {
	keys   []int64
	client *http.Client

	mu      sync.Mutex
	apis    map[string]chan struct{} // watched instances, by API URL: closed to stop its loops
	lastOK  map[string]time.Time
	longest map[string]time.Duration
	// partial counts range queries (GET /movies) answered with missing
	// partitions, by instance; partialAt is the last one's body.
	partial   map[string]int
	partialAt string
	// pending are the probe ratings sent and not yet answered, by key,
	// oldest first; stall is the longest one took, by key.
	pending map[int64][]sentRating
	stall   map[int64]time.Duration
	// answered is, by key, when the last probe rating answered was sent.
	answered map[int64]time.Time
	wg       sync.WaitGroup
}

// sentRating is a probe rating acknowledged by the broker at at, after
// which its movie has count ratings.
type sentRating struct {
	count int64
	at    time.Time
}

func startProber(keys []int64) *prober {
	return &prober{keys: keys, client: &http.Client{Timeout: time.Second}, apis: map[string]chan struct{}{},
		lastOK: map[string]time.Time{}, longest: map[string]time.Duration{}, partial: map[string]int{},
		pending: map[int64][]sentRating{}, stall: map[int64]time.Duration{}, answered: map[int64]time.Time{}}
}

// probeEvery is how often every probe asks.
const probeEvery = 100 * time.Millisecond

// loop calls probe every probeEvery until stop is closed.
func (pr *prober) loop(stop chan struct{}, probe func()) {
	pr.wg.Add(1)
	go func() {
		defer pr.wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(probeEvery):
			}
			probe()
		}
	}()
}

func (pr *prober) probeKey(api string, k int64, stop chan struct{}) {
	resp, err := pr.client.Get(fmt.Sprintf("%s/movies/%d", api, k))
	var m testkit.Movie
	ok := err == nil && resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&m) == nil
	if err == nil {
		resp.Body.Close()
	}
	now := time.Now()
	id := fmt.Sprintf("%s key %d", api, k)
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.apis[api] != stop {
		return // unwatched meanwhile
	}
	if ok {
		pr.lastOK[id] = now
		q := pr.pending[k]
		for len(q) > 0 && q[0].count <= m.Count {
			pr.stall[k] = max(pr.stall[k], now.Sub(q[0].at))
			pr.answered[k] = q[0].at
			q = q[1:]
		}
		pr.pending[k] = q
	} else if last, seen := pr.lastOK[id]; seen {
		pr.longest[id] = max(pr.longest[id], now.Sub(last))
	}
}

func (pr *prober) probeRange(api string, stop chan struct{}) {
	resp, err := pr.client.Get(api + "/movies?limit=5")
	if err != nil {
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"partial":true`) {
		return
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.apis[api] == stop {
		pr.partial[api]++
		pr.partialAt = time.Now().Format("15:04:05.000") + " " + api + " " + string(body)
	}
}

// watch starts (or, with on false, stops) probing api.
func (pr *prober) watch(api string, on bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if stop, ok := pr.apis[api]; ok {
		close(stop)
		delete(pr.apis, api)
		for id := range pr.lastOK {
			if strings.HasPrefix(id, api+" ") {
				delete(pr.lastOK, id)
			}
		}
	}
	if !on {
		return
	}
	stop := make(chan struct{})
	pr.apis[api] = stop
	// A gap counts from the moment the instance is watched (ready), not
	// from its first answer: one that never answers a key is a gap too.
	now := time.Now()
	for _, k := range pr.keys {
		pr.lastOK[fmt.Sprintf("%s key %d", api, k)] = now
	}
	for _, k := range pr.keys {
		pr.loop(stop, func() { pr.probeKey(api, k, stop) })
	}
	pr.loop(stop, func() { pr.probeRange(api, stop) })
}

// partials returns how many range queries answered partial since the
// last call, and the last such body.
func (pr *prober) partials() (int, string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	n := 0
	for _, v := range pr.partial {
		n += v
	}
	body := pr.partialAt
	pr.partial, pr.partialAt = map[string]int{}, ""
	return n, body
}

// worst returns the longest gap seen and where, and resets the record.
func (pr *prober) worst() (string, time.Duration) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	var at string
	var d time.Duration
	for id, g := range pr.longest {
		if g > d {
			at, d = id, g
		}
	}
	pr.longest = map[string]time.Duration{}
	return at, d
}

// expect records a probe rating of key k acknowledged at at, after which
// the movie has count ratings.
func (pr *prober) expect(k, count int64, at time.Time) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.pending[k] = append(pr.pending[k], sentRating{count: count, at: at})
}

// stalls returns the longest a probe rating took to be answered since
// the last call (one still unanswered counts its age), and its key, and
// resets the record.
func (pr *prober) stalls() (int64, time.Duration) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	now := time.Now()
	var key int64
	var d time.Duration
	for k, q := range pr.pending {
		g := pr.stall[k]
		if len(q) > 0 {
			g = max(g, now.Sub(q[0].at))
		}
		if g > d {
			key, d = k, g
		}
	}
	pr.stall = map[int64]time.Duration{}
	return key, d
}

// answeredSince returns an error unless a probe rating of every key sent
// after since was answered.
func (pr *prober) answeredSince(since time.Time) error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, k := range pr.keys {
		if !pr.answered[k].After(since) {
			return fmt.Errorf("no probe rating of key %d sent after %s answered yet", k, since.Format("15:04:05.000"))
		}
	}
	return nil
}

// close stops every probe and waits for them.
func (pr *prober) close() {
	pr.mu.Lock()
	for api, stop := range pr.apis {
		close(stop)
		delete(pr.apis, api)
	}
	pr.mu.Unlock()
	pr.wg.Wait()
}

// probeKeys returns one movie id of every partition of n, from 1 up.
func probeKeys(n int32) []int64 {
	var keys []int64
	seen := map[int32]bool{}
	for id := int64(1); len(seen) < int(n); id++ {
		p := engine.PartitionFor(movies.Key(id), n)
		if !seen[p] {
			seen[p] = true
			keys = append(keys, id)
		}
	}
	return keys
}

// TestScaleOutAndInWithoutPause: an instance joining a running one gets
// warm-ups first (standbys placed where the balance wants its actives),
// takes its actives only once they are caught up, with a replay of at
// most the acceptable lag; a stopping instance whose actives have
// standbys leaves the group at once instead of leaving its partitions
// dark for the session timeout. Throughout, every instance answers a key
// of every partition with no gap over 1 s, and every count is exact.
func TestScaleOutAndInWithoutPause(t *testing.T) {
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	ca := testConfig(t, brokers, reg.URL())
	ca.InstanceID = "a"
	ca.Partitions = 4
	ca.SessionTimeout = 10 * time.Second
	a := startInstance(t, ca)
	const movies = 400
	var lines []string
	for id := 1; id <= movies; id++ {
		lines = append(lines, fmt.Sprintf(`{"movie_id":%d,"rating":4}`, id))
	}
	produceJSON(t, ca, lines...)
	for id := int64(1); id <= movies; id += 37 {
		waitMovie(t, a.api, movie{MovieID: id, Rating: 4, Count: 1}, 30*time.Second)
	}
	waitMovie(t, a.api, movie{MovieID: movies, Rating: 4, Count: 1}, 30*time.Second)

	pr := startProber(probeKeys(ca.Partitions))
	defer pr.close()
	pr.watch(a.api, true)

	// Scale out: b joins with an empty data dir.
	cb := ca
	cb.InstanceID = "b"
	cb.DataDir = t.TempDir()
	b := launchInstance(t, cb)
	bAddr := strings.TrimPrefix(b.api, "http://")
	testkit.Eventually(t, 60*time.Second, "b runs half the partitions", func() error {
		st, err := stats(bAddr)
		if err != nil {
			return err
		}
		if st.Stats.PartitionsRunning != 2 || !st.Ready {
			return fmt.Errorf("b runs %d partitions (ready %v: %s)", st.Stats.PartitionsRunning, st.Ready, st.Reason)
		}
		return nil
	})
	pr.watch(b.api, true)
	st, err := stats(bAddr)
	if err != nil {
		t.Fatal(err)
	}
	if st.Stats.StandbyRecords == 0 {
		t.Errorf("b took its actives without a warm-up: standby records %d", st.Stats.StandbyRecords)
	}
	if lag := ca.AcceptableLag; st.Stats.ChangelogRestored > lag {
		t.Errorf("b replayed %d changelog records taking its actives, want at most the acceptable lag %d", st.Stats.ChangelogRestored, lag)
	}
	testkit.Eventually(t, 30*time.Second, "a keeps standbys of b's actives", func() error {
		sa, err := stats(strings.TrimPrefix(a.api, "http://"))
		if err != nil {
			return err
		}
		if sa.Stats.PartitionsStandby != 2 || sa.Stats.PartitionsRunning != 2 {
			return fmt.Errorf("a runs %d, keeps %d standbys; want 2 and 2", sa.Stats.PartitionsRunning, sa.Stats.PartitionsStandby)
		}
		return nil
	})
	if at, gap := pr.worst(); gap > time.Second {
		t.Errorf("scale-out: %s unanswered for %v, want at most 1s", at, gap)
	}

	// More ratings, then scale in: b stops; a must run every partition
	// well within the session timeout.
	lines = lines[:0]
	for id := 1; id <= movies; id++ {
		lines = append(lines, fmt.Sprintf(`{"movie_id":%d,"rating":6}`, id))
	}
	produceJSON(t, ca, lines...)
	waitMovie(t, a.api, movie{MovieID: movies, Rating: 5, Count: 2}, 30*time.Second)
	pr.watch(b.api, false)
	stopped := time.Now()
	b.stop(t)
	testkit.Eventually(t, 30*time.Second, "a runs every partition", func() error {
		sa, err := stats(strings.TrimPrefix(a.api, "http://"))
		if err != nil {
			return err
		}
		if sa.Stats.PartitionsRunning != 4 {
			return fmt.Errorf("a runs %d partitions", sa.Stats.PartitionsRunning)
		}
		return nil
	})
	if took := time.Since(stopped); took >= ca.SessionTimeout {
		t.Errorf("scale-in: a ran b's partitions %v after b stopped, want well under the session timeout %v", took, ca.SessionTimeout)
	}
	if at, gap := pr.worst(); gap > time.Second {
		t.Errorf("scale-in: %s unanswered for %v, want at most 1s", at, gap)
	}
	for id := int64(1); id <= movies; id++ {
		waitMovie(t, a.api, movie{MovieID: id, Rating: 5, Count: 2}, 10*time.Second)
	}
}
