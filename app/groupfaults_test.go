package app_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/movies"
)

// The group of the fault tests: clover, six partitions, one standby each,
// an acceptable lag below a partition's changelog, the child cluster's
// 3 s session timeout and 200 ms commit interval.
const (
	faultPartitions = 6
	faultLag        = 1000
	faultSession    = 3 * time.Second
	faultCommit     = 200 * time.Millisecond
)

// faultGroup is a group of child instances with the ratings sent to it,
// a prober asking every watched instance for a key of every partition,
// and a flow of ratings. The truth is read only with mu held.
type faultGroup struct {
	t      *testing.T
	cc     *crashCluster
	c      app.Config
	movies int64
	live   []*crashInstance
	pr     *prober

	mu    sync.Mutex
	truth map[int64]testkit.Movie
	sums  map[int64]float64

	stop, flowed chan struct{}
	flowErr      error // set before flowed is closed
}

// newFaultGroup starts one instance per name (prepare, when set, may
// change an instance before its first start), waits until each is ready,
// sends one rating per movie on average and waits until every output is
// exact; then it probes every instance.
func newFaultGroup(t *testing.T, movieCount int64, names []string, prepare func(*crashInstance)) *faultGroup {
	t.Helper()
	if testing.Short() {
		t.Skip("runs, kills and restarts child processes")
	}
	cc := newChildCluster(t)
	g := &faultGroup{t: t, cc: cc, c: cc.cfg, movies: movieCount, truth: map[int64]testkit.Movie{}, sums: map[int64]float64{},
		pr: startProber(probeKeys(faultPartitions))}
	t.Cleanup(g.pr.close)
	for _, name := range names {
		in := g.newInst(name)
		if prepare != nil {
			prepare(in)
		}
		cc.start(in)
		g.live = append(g.live, in)
	}
	began := time.Now()
	for _, in := range g.live {
		cc.waitReady(in, 60*time.Second)
	}
	if err := g.send(movieCount, 1); err != nil {
		t.Fatalf("produce: %v", err)
	}
	t.Logf("%d instances ready and %d ratings sent in %v", len(g.live), movieCount, time.Since(began).Round(10*time.Millisecond))
	g.balanced("before the fault", 60*time.Second)
	g.mu.Lock()
	waitOutputsExact(t, g.c, "http://"+g.live[0].api, g.truth, "before the fault")
	g.mu.Unlock()
	t.Logf("balanced and exact %v after the start", time.Since(began).Round(10*time.Millisecond))
	for _, in := range g.live {
		g.pr.watch("http://"+in.api, true)
	}
	return g
}

// newInst returns a static instance of the group, not started.
func (g *faultGroup) newInst(name string) *crashInstance {
	in := g.cc.newInstance(name, true)
	in.extraArgs = []string{"--partitions", fmt.Sprint(faultPartitions), "--standby-replicas", "1", "--acceptable-lag", fmt.Sprint(faultLag)}
	return in
}

// send produces count ratings with seed and adds them to the truth.
func (g *faultGroup) send(count int64, seed uint64) error {
	p := produceConfig(g.c, count, g.movies, seed)
	g.mu.Lock()
	defer g.mu.Unlock()
	truthOf(p, g.truth, g.sums)
	n, err := app.Produce(context.Background(), p, nil)
	if err == nil && n != count {
		err = fmt.Errorf("produced %d ratings, want %d", n, count)
	}
	return err
}

// flow sends 100 ratings every 100 ms until stopFlow.
func (g *faultGroup) flow() {
	g.stop, g.flowed = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(g.flowed)
		for seed := uint64(1000); ; seed++ {
			select {
			case <-g.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if err := g.send(100, seed); err != nil {
				g.flowErr = err
				return
			}
		}
	}()
}

// stopFlow ends the flow of ratings and fails the test if a send failed.
func (g *faultGroup) stopFlow() {
	if g.stop == nil {
		return
	}
	close(g.stop)
	<-g.flowed
	g.stop = nil
	if g.flowErr != nil {
		g.t.Fatalf("produce: %v", g.flowErr)
	}
}

// remove takes in out of the live instances and stops probing it.
func (g *faultGroup) remove(in *crashInstance) {
	g.pr.watch("http://"+in.api, false)
	g.live = slices.DeleteFunc(g.live, func(o *crashInstance) bool { return o == in })
}

// balanced waits until the live instances run every partition between
// them, at most one apart.
func (g *faultGroup) balanced(what string, timeout time.Duration) {
	g.t.Helper()
	testkit.Eventually(g.t, timeout, what+": actives balanced", func() error {
		lo, hi, sum := faultPartitions, 0, 0
		for _, in := range g.live {
			st, err := stats(in.api)
			if err != nil {
				return err
			}
			n := int(st.Stats.PartitionsRunning)
			lo, hi, sum = min(lo, n), max(hi, n), sum+n
		}
		if sum != faultPartitions || hi-lo > 1 {
			return fmt.Errorf("running per instance: sum %d, max-min %d", sum, hi-lo)
		}
		return nil
	})
}

// exact stops the flow and waits until every output is exact, on every
// live instance.
func (g *faultGroup) exact(when string) {
	g.t.Helper()
	g.stopFlow()
	for _, in := range g.live {
		g.pr.watch("http://"+in.api, false)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	began := time.Now()
	// The topics once, then the API of every instance.
	waitOutputsExact(g.t, g.c, "http://"+g.live[0].api, g.truth, when)
	for _, in := range g.live[1:] {
		waitAllExact(g.t, in.api, g.truth)
	}
	g.t.Logf("%s: %d movies exact on every output of %d instances (checked in %v)", when, len(g.truth), len(g.live), time.Since(began).Round(10*time.Millisecond))
}

// gap fails the test when a watched instance left a probe key unanswered
// longer than limit since the last call, and returns the longest gap.
func (g *faultGroup) gap(what string, limit time.Duration) time.Duration {
	g.t.Helper()
	at, d := g.pr.worst()
	if d > limit {
		g.t.Errorf("%s: %s unanswered for %v, want at most %v", what, at, d, limit)
	} else {
		g.t.Logf("%s: longest probe gap %v (%s)", what, d.Round(time.Millisecond), at)
	}
	return d
}

// TestE2EWarmupKilledMidCatchUp scales a group of three out to four with
// an empty data dir and kills the new instance (kill -9) while its stats
// show it tailing warm-ups and running no active; it is started again on
// the same data dir. The warm-ups are killed before any active moved, so
// no live instance leaves a probe key unanswered for more than 1 s; the
// group ends balanced and every output exact on every instance.
func TestE2EWarmupKilledMidCatchUp(t *testing.T) {
	g := newFaultGroup(t, 20000, []string{"a", "b", "c"}, nil)
	g.flow()
	defer g.stopFlow()
	g.pr.worst()

	// Scale out, and kill d while it tails its warm-ups and runs no
	// active; an attempt whose warm-up caught up before the kill (its
	// member rejoined) is started over with an empty data dir.
	d := g.newInst("d")
	var began time.Time
	for attempt := 1; ; attempt++ {
		began = time.Now()
		g.cc.start(d)
		var seen testkit.APIStats[engine.Stats]
		err := watchClosely(60*time.Second, func() (bool, error) {
			st, err := stats(d.api)
			switch {
			case err != nil:
				return false, nil // not listening yet
			case st.Stats.PartitionsRunning > 0 || st.Stats.PartitionsAssigned > 0:
				return true, nil // too late: judged below
			case st.Stats.PartitionsStandby == 0:
				return false, nil
			}
			seen = st
			return true, nil
		})
		if err != nil {
			t.Fatalf("d never seen tailing warm-ups: %v", err)
		}
		d.proc.Kill()
		warmups := warmupsRe.FindAllString(d.proc.Output(), -1)
		if seen.Stats.PartitionsStandby > 0 && len(warmups) > 0 && !strings.Contains(d.proc.Output(), "rejoining the group") {
			t.Logf("attempt %d: killed d %v after its start, mid-warm-up (%s): %d replicas, %d changelog records read",
				attempt, time.Since(began).Round(time.Millisecond), warmups[len(warmups)-1], seen.Stats.PartitionsStandby, seen.Stats.StandbyRecords)
			break
		}
		if attempt == 5 {
			t.Fatalf("in %d attempts d's warm-ups caught up before it could be killed: give the test more state", attempt)
		}
		t.Logf("attempt %d: d's warm-ups caught up before the kill; again with an empty data dir", attempt)
		loseStore(t, d)
	}
	g.gap("warm-up killed", time.Second)

	g.cc.start(d)
	g.cc.waitReady(d, 60*time.Second)
	g.live = append(g.live, d)
	g.pr.watch("http://"+d.api, true)
	g.balanced("after the restart of d", 60*time.Second)
	st, err := stats(d.api)
	if err != nil {
		t.Fatal(err)
	}
	if st.Stats.ChangelogRestored > faultLag {
		t.Errorf("restarted d replayed %d changelog records taking its actives, want at most the acceptable lag %d", st.Stats.ChangelogRestored, faultLag)
	}
	t.Logf("restarted d balanced %v after the first start; it read %d standby records, restored %d",
		time.Since(began).Round(10*time.Millisecond), st.Stats.StandbyRecords, st.Stats.ChangelogRestored)
	g.gap("restart of d until balanced", time.Second)
	g.exact("after the warm-up was killed")
}

// watchClosely calls cond every 5 ms until it reports done or an error,
// or timeout passes: a poll for a moment that may pass quickly.
func watchClosely(timeout time.Duration, cond func() (done bool, err error)) error {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		if done, err := cond(); done || err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
	return fmt.Errorf("not seen within %v", timeout)
}

// TestE2EStandbyDiskFull runs instance c of three on a volume that its
// store then fills up while ratings flow. Its standby copies fail to catch
// up and its actives wait for space; c says so in its log and /readyz.
// The actives on the other instances are not held back, neither while the
// group stands still nor through the rebalances of a fourth instance
// joining: ratings of their partitions show in the API within the commit
// interval plus 2 s, and their counters advance. Once the volume is grown
// every output is exact on every instance and the group is balanced.
func TestE2EStandbyDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a volume")
	}
	vol := testkit.SmallVolume(t, docstore.DefaultDiskReserve+256<<20)
	g := newFaultGroup(t, 6000, []string{"a", "b", "c"}, func(in *crashInstance) {
		if in.name == "c" {
			in.dataDir = vol.Dir
		}
	})
	defer g.stopFlow()
	a, b, c := g.live[0], g.live[1], g.live[2]
	g.flow()
	// The same rounds with every disk fine, for the log.
	var baseline time.Duration
	for i := range 3 {
		took, _ := visibleWithin(t, g, []*crashInstance{a, b}, uint64(50+i), time.Minute)
		baseline = max(baseline, took)
	}
	t.Logf("every disk fine: ratings of a's and b's actives visible within %v", baseline.Round(time.Millisecond))
	// Leave c less free space than the store's reserve: full. (Filling
	// a few MiB takes a memtable flush: the log's file is preallocated.)
	used := volumeUsed(t, vol.Dir)
	vol.Resize(t, used+docstore.DefaultDiskReserve-1<<20)
	waitNotReady(t, "http://"+c.api, "disk full")
	testkit.Eventually(t, 30*time.Second, "c logs its standby failing on the full disk", func() error {
		for _, line := range strings.Split(c.proc.Output(), "\n") {
			if strings.Contains(line, "op=replay") && strings.Contains(line, "disk full") {
				return nil
			}
		}
		return errorf("no standby warning naming the full disk")
	})
	g.pr.worst()

	others := []*crashInstance{a, b}
	processed := func() map[string]int64 {
		out := map[string]int64{}
		for _, in := range others {
			st, err := stats(in.api)
			if err != nil {
				t.Fatal(err)
			}
			out[in.name] = st.Stats.RecordsProcessed
		}
		return out
	}
	before := processed()
	// The commit interval plus 2 s; the race detector slows every process
	// several times (3 s and more with every disk fine on a loaded
	// machine). A member holding up the group's rebalance for its full
	// disk costs more: up to the final flush's 30 s.
	limit := faultCommit + 2*time.Second
	if testkit.RaceEnabled {
		limit *= 5
	}
	var slowest time.Duration
	seed := uint64(100)
	round := func(what string) {
		t.Helper()
		seed++
		took, n := visibleWithin(t, g, others, seed, limit+10*time.Second)
		slowest = max(slowest, took)
		if took > limit {
			t.Errorf("%s: ratings of %d movies active on %d other instances visible after %v, want at most %v", what, n, len(others), took, limit)
		}
	}
	for range 5 {
		round("c full")
	}
	t.Logf("c full: ratings of the other instances' actives visible within %v", slowest.Round(time.Millisecond))

	// A group change while c is full: d joins, takes warm-ups, then actives.
	d := g.newInst("d")
	g.cc.start(d)
	g.cc.waitReady(d, 60*time.Second)
	others = append(others, d)
	g.pr.watch("http://"+d.api, true)
	slowest = 0
	for i := 0; ; i++ {
		round("d joining")
		st, err := getGroupStats(d.api)
		if err != nil {
			t.Fatal(err)
		}
		// Done once d runs actives and warms up nothing more (it may keep
		// standbys: the assignor spreads them over the members).
		warming := 0
		for _, roles := range st.Partitions {
			for _, r := range roles {
				if r.Role == engine.RoleWarmup {
					warming++
				}
			}
		}
		if i >= 4 && st.Stats.PartitionsRunning > 0 && warming == 0 {
			break
		}
		if i > 60 {
			t.Fatalf("d runs %d partitions and warms up %d after %d rounds; want it to take actives", st.Stats.PartitionsRunning, warming, i)
		}
	}
	t.Logf("d joining while c is full: ratings of the other instances' actives visible within %v", slowest.Round(time.Millisecond))
	after := processed()
	for _, in := range []*crashInstance{a, b} {
		if after[in.name] <= before[in.name] {
			t.Errorf("%s processed %d records before the rounds and %d after; want more", in.name, before[in.name], after[in.name])
		}
	}
	if code, body := httpGet("http://" + c.api + "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "disk full") {
		t.Errorf("c's readyz after the rounds: %d %s; want 503 naming the full disk", code, body)
	}
	at, gap := g.pr.worst()
	t.Logf("c full: longest probe gap on a, b and d %v (%s)", gap.Round(time.Millisecond), at)

	vol.Resize(t, used+docstore.DefaultDiskReserve+512<<20)
	g.live = append(g.live, d)
	g.cc.waitReady(c, 60*time.Second)
	g.balanced("after c's volume was grown", 60*time.Second)
	g.exact("after c's volume was grown")
}

// visibleWithin sends 60 ratings and returns how long after they were
// sent the API of ins[0] answered each movie they changed whose partition
// runs on one of ins with at least that count, and how many movies that was.
func visibleWithin(t *testing.T, g *faultGroup, ins []*crashInstance, seed uint64, timeout time.Duration) (time.Duration, int) {
	t.Helper()
	var owned []int32
	for _, in := range ins {
		ps, err := ownPartitions(in.api)
		if err != nil {
			t.Fatal(err)
		}
		owned = append(owned, ps...)
	}
	g.mu.Lock()
	old := maps.Clone(g.truth)
	g.mu.Unlock()
	if err := g.send(60, seed); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	g.mu.Lock()
	want := map[int64]int64{}
	for id, m := range g.truth {
		if m.Count != old[id].Count && slices.Contains(owned, engine.PartitionFor(movies.Key(id), faultPartitions)) {
			want[id] = m.Count
		}
	}
	g.mu.Unlock()
	n := len(want)
	var last string
	err := watchClosely(timeout, func() (bool, error) {
		for id, n := range want {
			var got testkit.Movie
			code, err := testkit.GetJSON(fmt.Sprintf("http://%s/movies/%d", ins[0].api, id), &got)
			if err != nil || code != http.StatusOK || got.Count < n {
				last = fmt.Sprintf("movie %d (partition %d): %d %v count %d, want at least %d",
					id, engine.PartitionFor(movies.Key(id), faultPartitions), code, err, got.Count, n)
				return false, nil
			}
			delete(want, id)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("ratings of %d movies active on %v not visible on %s %v after they were sent: %v; %s", len(want), owned, ins[0].name, time.Since(sent), err, last)
	}
	return time.Since(sent), n
}

// volumeUsed returns the bytes used on the filesystem of dir.
func volumeUsed(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// TestE2ELeaderKilledDuringAssignment starts a fourth instance into a
// group of three and kills the group's leader (kill -9) the moment the
// coordinator reports the rebalance this starts, before the leader has
// planned it. The group recovers without it: a new leader plans, the
// others run every partition, balanced, no live instance leaves a probe
// key unanswered for longer than the session timeout plus 2 s, and every
// output is exact on every instance.
func TestE2ELeaderKilledDuringAssignment(t *testing.T) {
	g := newFaultGroup(t, 6000, []string{"a", "b", "c"}, nil)
	leader := leaderOf(t, g.live)
	admin := testAdmin(t, g.c.Brokers)
	g.flow()
	defer g.stopFlow()
	g.pr.worst()

	plans := len(plannedRe.FindAllString(leader.proc.Output(), -1))
	d := g.newInst("d")
	g.cc.start(d)
	var state string
	err := watchClosely(60*time.Second, func() (bool, error) {
		groups, err := admin.DescribeConsumerGroups([]string{g.c.ApplicationID})
		if err != nil || len(groups) != 1 {
			return false, nil
		}
		state = groups[0].State
		return state != "Stable", nil
	})
	if err != nil {
		t.Fatalf("the group never left the Stable state after d started: %v", err)
	}
	leader.proc.Kill()
	killed := time.Now()
	g.remove(leader)
	if n := len(plannedRe.FindAllString(leader.proc.Output(), -1)); n != plans {
		t.Logf("the leader had planned the rebalance already when it was killed")
	}
	t.Logf("killed the leader %s when the group was %s", leader.name, state)
	g.cc.waitReady(d, 60*time.Second)
	g.live = append(g.live, d)
	g.pr.watch("http://"+d.api, true)
	g.balanced("after the leader was killed", 60*time.Second)
	t.Logf("balanced %v after the kill", time.Since(killed).Round(10*time.Millisecond))
	g.gap("leader killed during an assignment", faultSession+2*time.Second)
	t.Logf("new leader %s", leaderOf(t, g.live).name)
	g.exact("after the leader was killed")
}

// warmupsRe finds the warm-ups of an assignment in its log line.
var warmupsRe = regexp.MustCompile(`warmup="?\[[0-9 ]+\]`)

// plannedRe finds the leader's log line of an assignment plan.
var plannedRe = regexp.MustCompile(`msg="assignment planned".* members=\d+`)

// leaderOf returns the instance that logged the group's last assignment
// plan: the leader.
func leaderOf(t *testing.T, live []*crashInstance) *crashInstance {
	t.Helper()
	var leader *crashInstance
	var last string
	for _, in := range live {
		for _, line := range strings.Split(in.proc.Output(), "\n") {
			if !plannedRe.MatchString(line) {
				continue
			}
			if at, _, _ := strings.Cut(line, " "); at > last {
				leader, last = in, at
			}
		}
	}
	if leader == nil {
		t.Fatal("no instance logged an assignment plan")
	}
	return leader
}
