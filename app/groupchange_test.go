package app_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/movies"
)

// groupPhase is one group change of TestE2EGroupChangesWithoutPause:
// run makes it happen and waits until the actives are balanced again;
// maxStall bounds how long a partition's processing may stop in it.
type groupPhase struct {
	name     string
	maxStall time.Duration
	// killed: an instance dies in it (kill -9), maybe between a flush's
	// commit and its store write, which the next owner then replays even
	// from a shared store.
	killed bool
	run    func()
}

// phaseFigures are what a phase is checked and reported on.
type phaseFigures struct {
	gapAt    string        // the probe (instance and key) unanswered longest
	gap      time.Duration // longest time a live instance left a key unanswered
	stallKey int64         // the probe key whose rating took longest
	stall    time.Duration // longest time a probe rating took to be answered
	replay   int64         // most changelog records one restore replayed
	settle   time.Duration // longest time to balanced actives (a rolling restart: per instance)
	warmup   time.Duration // the warm-up time within it
}

// TestE2EGroupChangesWithoutPause runs three instances (clover, 12
// partitions, one standby each) over a uniform state (every movie rated
// once) while ratings flow, and a prober asks every live instance for one
// key of every partition every 100 ms and rates every probe key every
// 500 ms, through the group changes a Kubernetes deployment goes through:
// scale-out to four (an empty data dir), a rolling restart of every
// instance, scale-in to three, and a node lost with its volume (kill -9,
// data dir deleted), restarted at once and, the second time, past the
// session timeout. In every phase no live instance leaves a probe key
// unanswered for more than 1 s; every probe rating is answered within the
// commit interval + 2 s (a node lost for longer than the session timeout:
// the session timeout + 2 s; the test fails over twice that, for a loaded
// machine, and logs what is over); no restore replays more than the acceptable
// lag; and the actives are balanced (at most one apart) within the
// phase's warm-up time + 5 s. At the end every output is exact on every
// instance.
func TestE2EGroupChangesWithoutPause(t *testing.T) { runGroupChangeTest(t, app.StoreClover) }

// TestE2EGroupChangesWithoutPauseRedis is the same on a shared store
// (Redis): no standbys; partitions move with no replay, but after a kill -9
// the tail the dead instance committed and had not written yet.
func TestE2EGroupChangesWithoutPauseRedis(t *testing.T) { runGroupChangeTest(t, app.StoreRedis) }

// groupStats is the part of GET /api/stats the group-change test reads.
type groupStats struct {
	Stats      engine.Stats                      `json:"stats"`
	Partitions map[string][]engine.PartitionRole `json:"partitions"`
}

func getGroupStats(api string) (groupStats, error) {
	var st groupStats
	code, err := testkit.GetJSON("http://"+api+"/api/stats", &st)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("/api/stats: %d", code)
	}
	return st, err
}

// sendRatings sends rs as JSON lines through app.Produce and, once the
// broker acknowledged them, counts them into truth and sums.
func sendRatings(c app.Config, rs []avro.Rating, truth map[int64]testkit.Movie, sums map[int64]float64) error {
	r, w := io.Pipe()
	go func() {
		bw := bufio.NewWriter(w)
		for _, x := range rs {
			fmt.Fprintf(bw, "{\"movie_id\":%d,\"rating\":%g}\n", x.MovieID, x.Rating)
		}
		w.CloseWithError(bw.Flush())
	}()
	p := produceConfig(c, 0, 1, 1)
	p.Stdin = r
	n, err := app.Produce(context.Background(), p, nil)
	r.Close()
	if err == nil && n != int64(len(rs)) {
		err = fmt.Errorf("sent %d of %d ratings", n, len(rs))
	}
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	for _, x := range rs {
		m := truth[x.MovieID]
		m.MovieID = x.MovieID
		m.Count++
		sums[x.MovieID] += x.Rating
		m.Rating = sums[x.MovieID] / float64(m.Count)
		truth[x.MovieID] = m
	}
	return nil
}

func runGroupChangeTest(t *testing.T, store string) {
	if testing.Short() {
		t.Skip("runs, kills and restarts child processes")
	}
	const (
		partitions  = 12
		session     = 3 * time.Second        // the child cluster's --session-timeout
		commitEvery = 200 * time.Millisecond // and its --commit-interval
		maxGap      = time.Second
		acceptedLag = 1000 // below a partition's changelog: a full replay would show
		// lostFor is how long the second lost node stays away: past the
		// session timeout, so that the group moves its partitions first.
		lostFor = session + 2*time.Second
	)
	// maxStall bounds a probe rating's way to the answers: processing may
	// stop for at most 2 s beyond the commit interval. settleAfterWarmup
	// bounds the time to balanced actives beyond the phase's warm-up time.
	maxStall, settleAfterWarmup := commitEvery+2*time.Second, 5*time.Second
	// timing reports a missed time bound: an error, but under the race
	// detector (kfake, in the unit run), whose instances run several times
	// slower on two shared cores, a log line: there the run checks races,
	// exactness and replays, and the integration run checks the times.
	timing := t.Errorf
	if testkit.RaceEnabled {
		timing = func(format string, args ...any) {
			t.Helper()
			t.Logf("not checked under the race detector: "+format, args...)
		}
	}
	catalog := int64(12000) // 1,000 documents a partition
	if testkit.RaceEnabled {
		catalog = 6000 // half the processing for the slower instances
	}
	if n, err := strconv.ParseInt(os.Getenv("KEEPSTATE_GROUPCHANGE_MOVIES"), 10, 64); err == nil && n > 0 {
		catalog = n // a larger state, for the figures in docs/benchmarks.md
	}
	cc := newChildCluster(t)
	if store == app.StoreRedis {
		useRedis(t, &cc.cfg)
	}
	c := cc.cfg
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	newInst := func(name string) *crashInstance {
		in := cc.newInstance(name, true)
		in.extraArgs = []string{"--partitions", fmt.Sprint(partitions), "--standby-replicas", "1", "--acceptable-lag", fmt.Sprint(acceptedLag)}
		return in
	}
	all := []*crashInstance{newInst("a"), newInst("b"), newInst("c"), newInst("d")}
	live := slices.Clone(all[:3])
	for _, in := range live {
		cc.start(in)
	}
	for _, in := range live {
		cc.waitReady(in, 60*time.Second)
	}
	// The state: every movie rated once.
	filled := time.Now()
	fill := make([]avro.Rating, catalog)
	for i := range fill {
		id := int64(i) + 1
		fill[i] = avro.Rating{MovieID: id, Rating: float64(id%21) / 2}
	}
	if err := sendRatings(c, fill, truth, sums); err != nil {
		t.Fatal(err)
	}
	fill = nil
	// Millions of movies take minutes to process: wait for them before the
	// exactness check, whose own waits are shorter.
	testkit.Eventually(t, max(time.Minute, time.Duration(catalog/2000)*time.Second), "the state processed", func() error {
		var n int64
		for _, in := range live {
			st, err := getGroupStats(in.api)
			if err != nil {
				return err
			}
			n += st.Stats.RecordsProcessed
		}
		if n < catalog {
			return fmt.Errorf("%d of %d ratings processed", n, catalog)
		}
		return nil
	})
	waitOutputsExact(t, c, "http://"+live[0].api, truth, "before the group changes")
	t.Logf("%d movies, one rating each, sent and counted in %v", catalog, time.Since(filled).Round(time.Second))

	keys := probeKeys(partitions)
	pr := startProber(keys)
	defer pr.close()
	for _, in := range live {
		pr.watch("http://"+in.api, true)
	}
	// Ratings flow throughout: 300 every 100 ms over all movies, uniform
	// (100 under the race detector, whose instances' warm-ups would not
	// catch up with more), and every 500 ms one rating of every probe key,
	// whose answer the prober waits for.
	flow := 300
	if testkit.RaceEnabled {
		flow = 100
	}
	var mu sync.Mutex
	stop, flowed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(flowed)
		rnd := rand.New(rand.NewPCG(7, 11))
		for tick := 1; ; tick++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			rs := make([]avro.Rating, 0, flow+len(keys))
			for range flow {
				rs = append(rs, avro.Rating{MovieID: rnd.Int64N(catalog) + 1, Rating: float64(rnd.IntN(21)) / 2})
			}
			probing := tick%5 == 0
			if probing {
				for _, k := range keys {
					rs = append(rs, avro.Rating{MovieID: k, Rating: float64(rnd.IntN(21)) / 2})
				}
			}
			mu.Lock()
			err := sendRatings(c, rs, truth, sums)
			if err == nil && probing {
				at := time.Now()
				for _, k := range keys {
					pr.expect(k, truth[k].Count, at)
				}
			}
			mu.Unlock()
			if err != nil {
				t.Errorf("ratings flow: %v", err)
				return
			}
		}
	}()
	stopFlow := sync.OnceFunc(func() { close(stop); <-flowed })
	defer stopFlow()

	// Warm-ups seen on any instance, polled every 100 ms: the phase's
	// warm-up time runs from the first to the last poll that saw one.
	var wmu sync.Mutex
	var warmFirst, warmLast time.Time
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, in := range all {
				st, err := getGroupStats(in.api)
				if err != nil {
					continue
				}
				for _, roles := range st.Partitions {
					for _, r := range roles {
						if r.Role == engine.RoleWarmup {
							now := time.Now()
							wmu.Lock()
							if warmFirst.IsZero() {
								warmFirst = now
							}
							warmLast = now
							wmu.Unlock()
						}
					}
				}
			}
		}
	}()
	defer func() { stopFlow(); <-watched }()
	// warmup returns the warm-up time seen since the last call.
	warmup := func() time.Duration {
		wmu.Lock()
		defer wmu.Unlock()
		d := warmLast.Sub(warmFirst)
		warmFirst, warmLast = time.Time{}, time.Time{}
		return d
	}

	var fig phaseFigures
	// runningActives counts, per table, the RUNNING actives of each live
	// instance.
	runningActives := func() (map[string][]int, error) {
		running := map[string][]int{}
		for i, in := range live {
			st, err := getGroupStats(in.api)
			if err != nil {
				return nil, err
			}
			for table, roles := range st.Partitions {
				if running[table] == nil {
					running[table] = make([]int, len(live))
				}
				for _, r := range roles {
					if r.Role == engine.RoleActive && r.State == "RUNNING" {
						running[table][i]++
					}
				}
			}
		}
		if len(running) == 0 {
			return nil, errors.New("no table's partitions listed")
		}
		return running, nil
	}
	// covered waits until every partition runs somewhere, balanced or not.
	covered := func(what string) {
		testkit.Eventually(t, 120*time.Second, what+": every partition running", func() error {
			running, err := runningActives()
			if err != nil {
				return err
			}
			for table, n := range running {
				if sum := sumInts(n); sum != partitions {
					return fmt.Errorf("%s: running actives per instance %v, want %d in all", table, n, partitions)
				}
			}
			return nil
		})
	}
	// settle waits until the live instances run every partition, each
	// table's actives at most one apart, and checks that it took at most
	// the warm-up time + 5 s from began.
	settle := func(what string, began time.Time) {
		testkit.Eventually(t, 120*time.Second, what+": actives balanced", func() error {
			running, err := runningActives()
			if err != nil {
				return err
			}
			for table, n := range running {
				if sum := sumInts(n); sum != partitions || slices.Max(n)-slices.Min(n) > 1 {
					return fmt.Errorf("%s: running actives per instance %v, want %d at most one apart", table, n, partitions)
				}
			}
			return nil
		})
		took, warm := time.Since(began), warmup()
		if took > warm+settleAfterWarmup {
			timing("%s: actives balanced %v after the change began, want at most the warm-up time %v + %v", what, took.Round(10*time.Millisecond), warm.Round(10*time.Millisecond), settleAfterWarmup)
		}
		if took > fig.settle {
			fig.settle, fig.warmup = took, warm
		}
	}
	// replays checks the restores a process of in logged since the last
	// call: none may replay more than the acceptable lag (a partition
	// moves only to an instance that is that close).
	counted := map[*testkit.Process]int{}
	var restores, mostReplayed int64
	replays := func(in *crashInstance) {
		if in.proc == nil {
			return
		}
		seen := 0
		for _, line := range strings.Split(in.proc.Output(), "\n") {
			m := restoredRe.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if seen++; seen <= counted[in.proc] {
				continue
			}
			n, _ := strconv.ParseInt(m[1], 10, 64)
			restores, mostReplayed, fig.replay = restores+1, max(mostReplayed, n), max(fig.replay, n)
			if n > acceptedLag {
				t.Errorf("%s replayed %d changelog records in one restore, want at most %d: %s", in.name, n, acceptedLag, line)
			}
		}
		counted[in.proc] = seen
	}
	restart := func(in *crashInstance) {
		replays(in)
		cc.start(in)
		cc.waitReady(in, 60*time.Second)
		pr.watch("http://"+in.api, true)
	}
	remove := func(in *crashInstance) {
		live = slices.DeleteFunc(live, func(o *crashInstance) bool { return o == in })
	}
	phases := []groupPhase{
		{name: "scale-out 3 to 4", maxStall: maxStall, run: func() {
			began := time.Now()
			d := all[3]
			cc.start(d)
			cc.waitReady(d, 60*time.Second)
			live = append(live, d)
			pr.watch("http://"+d.api, true)
			settle("scale-out", began)
			st, err := getGroupStats(d.api)
			if err != nil {
				t.Fatalf("stats of d: %v", err)
			}
			if n := st.Stats.ChangelogRestored; n > acceptedLag {
				t.Errorf("scale-out: d replayed %d changelog records taking its actives, want at most %d", n, acceptedLag)
			}
		}},
		{name: "rolling restart", maxStall: maxStall, run: func() {
			for _, in := range live {
				began := time.Now()
				pr.watch("http://"+in.api, false)
				if err := in.proc.Stop(30 * time.Second); err != nil {
					t.Errorf("stop %s: %v", in.name, err)
				}
				restart(in)
				settle("rolling restart of "+in.name, began)
			}
		}},
		{name: "scale-in 4 to 3", maxStall: maxStall, run: func() {
			began := time.Now()
			d := live[len(live)-1]
			pr.watch("http://"+d.api, false)
			remove(d)
			if err := d.proc.Stop(30 * time.Second); err != nil {
				t.Errorf("stop d: %v", err)
			}
			// d left the group: its partitions run elsewhere before the
			// session timeout (balancing them may take a warm-up more).
			covered("scale-in")
			if took := time.Since(began); took > session {
				timing("scale-in: every partition ran %v after d stopped, want under the session timeout %v", took, session)
			}
			settle("scale-in", began)
		}},
		{name: "node lost, back at once", maxStall: maxStall, killed: true, run: func() {
			began := time.Now()
			in := live[1]
			pr.watch("http://"+in.api, false)
			in.proc.Kill()
			loseStore(t, in)
			restart(in)
			settle("node lost", began)
		}},
		// Its partitions wait out the session timeout before they move.
		{name: "node lost, back past the session timeout", maxStall: session + 2*time.Second, killed: true, run: func() {
			in := live[2]
			pr.watch("http://"+in.api, false)
			in.proc.Kill()
			loseStore(t, in)
			time.Sleep(lostFor) // the outage being simulated, not synchronisation
			began := time.Now()
			warmup() // the group's change is the return
			restart(in)
			settle("node lost for long", began)
		}},
	}
	for _, ph := range phases {
		pr.worst() // forget gaps and stalls before the phase
		pr.stalls()
		pr.partials()
		warmup()
		fig = phaseFigures{}
		began := time.Now()
		ph.run()
		// Every partition processes again: each one's stall is measured.
		testkit.Eventually(t, 60*time.Second, ph.name+": a probe rating of every partition answered", func() error {
			return pr.answeredSince(began)
		})
		for _, in := range all {
			replays(in)
		}
		// A range query may come back partial, flagged, for a moment of a
		// rebalance: when the members left with a copy of a partition are
		// its active, its read lease lapsed while the group waits out a dead
		// member, and a standby on the dead one. Counted, not failed here;
		// TestE2EPeerKilledQueriesSurvive holds ranges complete while one
		// instance is dead.
		if n, body := pr.partials(); n > 0 {
			t.Logf("%s: %d range queries answered with missing partitions, the last: %s … %s", ph.name, n, body[:min(len(body), 40)], body[max(0, len(body)-90):])
		}
		if store == app.StoreRedis && !ph.killed && fig.replay > 0 {
			t.Errorf("%s: a restore replayed %d changelog records on a shared store, want none", ph.name, fig.replay)
		}
		fig.gapAt, fig.gap = pr.worst()
		fig.stallKey, fig.stall = pr.stalls()
		if fig.gap > maxGap {
			timing("%s: %s unanswered for %v, want at most %v", ph.name, fig.gapAt, fig.gap, maxGap)
		}
		// The stall target is missed by up to ~2 s when two shared cores
		// are busy with other tests (every rebalance stops every partition
		// while members rejoin): over it is logged, over twice it fails.
		if fig.stall > ph.maxStall {
			report := t.Logf
			if fig.stall > 2*ph.maxStall {
				report = timing
			}
			report("%s: a rating of probe key %d (partition %d) answered after %v, over the target %v (fails over twice that)", ph.name, fig.stallKey,
				engine.PartitionFor(movies.Key(fig.stallKey), partitions), fig.stall.Round(time.Millisecond), ph.maxStall)
		}
		t.Logf("%s: longest gap %v (%s), longest stall %v (key %d), largest replay %d, balanced after %v (warm-up %v)",
			ph.name, fig.gap.Round(time.Millisecond), fig.gapAt, fig.stall.Round(time.Millisecond), fig.stallKey,
			fig.replay, fig.settle.Round(10*time.Millisecond), fig.warmup.Round(10*time.Millisecond))
	}
	stopFlow()
	mu.Lock()
	defer mu.Unlock()
	// The topics once, then every instance's answers.
	waitOutputsExact(t, c, "http://"+live[0].api, truth, "after the group changes")
	for _, in := range live {
		waitAllExact(t, in.api, truth)
		replays(in)
	}
	t.Logf("%d restores, the largest replayed %d changelog records", restores, mostReplayed)
	if restores == 0 {
		t.Error("no restore logged: the replay check saw nothing")
	}
	if t.Failed() {
		for _, in := range live {
			var kept []string
			for _, line := range strings.Split(in.proc.Output(), "\n") {
				if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "partitions assigned") {
					kept = append(kept, line)
				}
			}
			t.Logf("%s warnings and assignments:\n%s", in.name, tail(strings.Join(kept, "\n"), 80))
		}
	}
}

// restoredRe finds the records a restore replayed in its log line.
var restoredRe = regexp.MustCompile(`msg="partition restored".* records=(\d+)`)

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func sumInts(n []int) int {
	s := 0
	for _, v := range n {
		s += v
	}
	return s
}
