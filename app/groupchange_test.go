package app_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// groupPhase is one group change of TestE2EGroupChangesWithoutPause.
type groupPhase struct {
	name string
	run  func()
}

// TestE2EGroupChangesWithoutPause runs three instances (clover, six
// partitions, one standby each) while ratings flow and a prober asks every
// live instance for a key of every partition every 50 ms, through the
// group changes a Kubernetes deployment goes through: scale-out to four
// (an empty data dir), a rolling restart of every instance, scale-in to
// three, and a node lost with its volume (kill -9, data dir deleted),
// restarted at once and, the second time, after the session timeout. In
// every phase no live instance leaves a probe key unanswered for more
// than 1 s, and the instance taking over replays at most the acceptable
// lag; at the end every output is exact on every instance.
func TestE2EGroupChangesWithoutPause(t *testing.T) { runGroupChangeTest(t, app.StoreClover) }

// TestE2EGroupChangesWithoutPauseRedis is the same on a shared store
// (Redis): no standbys, partitions move with no replay.
func TestE2EGroupChangesWithoutPauseRedis(t *testing.T) { runGroupChangeTest(t, app.StoreRedis) }

func runGroupChangeTest(t *testing.T, store string) {
	if testing.Short() {
		t.Skip("runs, kills and restarts child processes")
	}
	const (
		partitions  = 6
		session     = 3 * time.Second // the child cluster's --session-timeout
		maxGap      = time.Second
		acceptedLag = 1000 // below a partition's changelog: a full replay would show
	)
	movies := int64(6000)
	if n, err := strconv.ParseInt(os.Getenv("KEEPSTATE_GROUPCHANGE_MOVIES"), 10, 64); err == nil && n > 0 {
		movies = n // a larger state, for the figures in docs/benchmarks.md
	}
	cc := newChildCluster(t)
	if store == app.StoreRedis {
		useRedis(t, &cc.cfg)
	}
	c := cc.cfg
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	produce := producerInto(t, c, movies, truth, sums)
	var live []*crashInstance
	newInst := func(name string) *crashInstance {
		in := cc.newInstance(name, true)
		in.extraArgs = []string{"--partitions", fmt.Sprint(partitions), "--standby-replicas", "1", "--acceptable-lag", fmt.Sprint(acceptedLag)}
		return in
	}
	for _, name := range []string{"a", "b", "c"} {
		in := newInst(name)
		cc.start(in)
		live = append(live, in)
	}
	for _, in := range live {
		cc.waitReady(in, 60*time.Second)
	}
	produce(movies, 1) // most movies have a document
	waitOutputsExact(t, c, "http://"+live[0].api, truth, "before the group changes")

	pr := startProber(probeKeys(partitions))
	defer pr.close()
	for _, in := range live {
		pr.watch("http://"+in.api, true)
	}
	// Ratings flow throughout, 300 every 100 ms.
	var mu sync.Mutex
	stop, flowed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(flowed)
		for seed := uint64(100); ; seed++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			mu.Lock()
			produce(300, seed)
			mu.Unlock()
		}
	}()
	stopFlow := sync.OnceFunc(func() { close(stop); <-flowed })
	defer stopFlow()

	restored := func(in *crashInstance) int64 {
		st, err := stats(in.api)
		if err != nil {
			t.Fatalf("stats of %s: %v", in.name, err)
		}
		return st.Stats.ChangelogRestored
	}
	balanced := func(what string) {
		testkit.Eventually(t, 60*time.Second, what+": actives balanced", func() error {
			lo, hi, sum := partitions, 0, 0
			for _, in := range live {
				st, err := stats(in.api)
				if err != nil {
					return err
				}
				n := int(st.Stats.PartitionsRunning)
				lo, hi, sum = min(lo, n), max(hi, n), sum+n
			}
			if sum != partitions || hi-lo > 1 {
				return fmt.Errorf("running per instance: sum %d, max-min %d", sum, hi-lo)
			}
			return nil
		})
	}
	// replays checks every restore a process of in logged: none may
	// replay more than the acceptable lag (a partition moves only to an
	// instance that is that close).
	var restores, mostReplayed int64
	replays := func(in *crashInstance) {
		for _, line := range strings.Split(in.proc.Output(), "\n") {
			m := restoredRe.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			n, _ := strconv.ParseInt(m[1], 10, 64)
			restores, mostReplayed = restores+1, max(mostReplayed, n)
			if n > acceptedLag {
				t.Errorf("%s replayed %d changelog records in one restore, want at most %d: %s", in.name, n, acceptedLag, line)
			}
		}
	}
	restart := func(in *crashInstance, after time.Duration) {
		replays(in)
		pr.watch("http://"+in.api, false)
		time.Sleep(after) // the outage being simulated, not synchronisation
		cc.start(in)
		cc.waitReady(in, 60*time.Second)
		pr.watch("http://"+in.api, true)
	}
	remove := func(in *crashInstance) {
		for i, o := range live {
			if o == in {
				live = append(live[:i], live[i+1:]...)
				return
			}
		}
	}
	phases := []groupPhase{
		{name: "scale-out 3 to 4", run: func() {
			d := newInst("d")
			cc.start(d)
			cc.waitReady(d, 60*time.Second)
			live = append(live, d)
			pr.watch("http://"+d.api, true)
			balanced("scale-out")
			if n := restored(d); n > acceptedLag {
				t.Errorf("scale-out: d replayed %d changelog records taking its actives, want at most %d", n, acceptedLag)
			}
		}},
		{name: "rolling restart", run: func() {
			for _, in := range live {
				pr.watch("http://"+in.api, false)
				if err := in.proc.Stop(30 * time.Second); err != nil {
					t.Errorf("stop %s: %v", in.name, err)
				}
				restart(in, 0)
				balanced("rolling restart of " + in.name)
			}
		}},
		{name: "scale-in 4 to 3", run: func() {
			d := live[len(live)-1]
			pr.watch("http://"+d.api, false)
			remove(d)
			began := time.Now()
			if err := d.proc.Stop(30 * time.Second); err != nil {
				t.Errorf("stop d: %v", err)
			}
			replays(d)
			balanced("scale-in")
			if took := time.Since(began); took > session {
				t.Errorf("scale-in: partitions ran everywhere %v after d stopped, want under the session timeout %v", took, session)
			}
		}},
		{name: "node lost, back at once", run: func() {
			in := live[1]
			pr.watch("http://"+in.api, false)
			in.proc.Kill()
			loseStore(t, in)
			restart(in, 0)
			balanced("node lost")
		}},
		{name: "node lost, back after the session timeout", run: func() {
			in := live[2]
			pr.watch("http://"+in.api, false)
			in.proc.Kill()
			loseStore(t, in)
			restart(in, session+2*time.Second)
			balanced("node lost for long")
		}},
	}
	for _, ph := range phases {
		pr.worst() // forget gaps before the phase
		pr.partials()
		began := time.Now()
		ph.run()
		took := time.Since(began)
		// A range query may come back partial, flagged, for a moment of a
		// rebalance: when the members left with a copy of a partition are
		// its active, its read lease lapsed while the group waits out a dead
		// member, and a standby on the dead one. Counted, not failed here;
		// TestE2EPeerKilledQueriesSurvive holds ranges complete while one
		// instance is dead.
		if n, body := pr.partials(); n > 0 {
			t.Logf("%s: %d range queries answered with missing partitions, the last: %s … %s", ph.name, n, body[:min(len(body), 40)], body[max(0, len(body)-90):])
		}
		if at, gap := pr.worst(); gap > maxGap {
			t.Errorf("%s: %s unanswered for %v, want at most %v", ph.name, at, gap, maxGap)
		} else {
			t.Logf("%s: balanced after %v, longest gap %v (%s)", ph.name, took.Round(10*time.Millisecond), gap.Round(time.Millisecond), at)
		}
	}
	stopFlow()
	mu.Lock()
	defer mu.Unlock()
	for _, in := range live {
		waitOutputsExact(t, c, "http://"+in.api, truth, "after the group changes, on "+in.name)
		replays(in)
	}
	t.Logf("%d restores, the largest replayed %d changelog records", restores, mostReplayed)
	if store == app.StoreRedis && mostReplayed > 0 {
		t.Errorf("a restore replayed %d changelog records on a shared store, want none", mostReplayed)
	}
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
