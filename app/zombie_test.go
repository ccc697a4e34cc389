package app_test

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// zombieRatings is how many ratings of the movie the new owner counts
// while the zombie sleeps.
const zombieRatings = 2000

// repeatRating returns n JSON rating lines for movie id, all rated r.
func repeatRating(id int64, n int, r float64) []string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"movie_id":%d,"rating":%v}`, id, r)
	}
	return lines
}

// zombieScenario is the deterministic zombie of the exactly-once issue:
//
//  1. x owns every partition and holds movie 1 (5 ratings) in its cache,
//     not flushed (commit interval 60 s); x is paused (SIGSTOP);
//  2. y joins, takes the partitions once x's session timed out, and counts
//     the 5 ratings again plus zombieRatings more;
//  3. x is resumed (SIGCONT): it flushes what it held on its way out of
//     the lost session;
//  4. later x gets the partitions back (y stops, x restarts on its own
//     store) and counts one more rating.
//
// It returns every way the outputs differ from the truth; t fails only on
// harness problems, so the caller decides what the differences mean.
func zombieScenario(t *testing.T, store, guarantee string, full bool) []error {
	cc := newChildCluster(t)
	if store == app.StoreRedis {
		useRedis(t, &cc.cfg)
	}
	g := []string{"--processing-guarantee", guarantee}
	x := cc.newInstance("x", false)
	x.extraArgs = append([]string{"--commit-interval", "60s", "--cache-max-docs", "1000000", "--idle-flush", "0"}, g...)
	cc.start(x)
	cc.waitReady(x, 60*time.Second)

	const movie = 1
	produceJSON(t, cc.cfg, repeatRating(movie, 5, 8)...)
	testkit.Eventually(t, 30*time.Second, "x counted 5 ratings in its cache", func() error {
		st, err := stats(x.api)
		if err == nil && st.Stats.RecordsProcessed < 5 {
			err = fmt.Errorf("x processed %d", st.Stats.RecordsProcessed)
		}
		return err
	})
	before, err := stats(x.api)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = x.proc.Signal(syscall.SIGCONT)
		}
	}
	defer resume()

	y := cc.newInstance("y", false)
	y.extraArgs = g
	cc.start(y)
	testkit.Eventually(t, 60*time.Second, "y runs every partition", func() error {
		st, err := stats(y.api)
		if err == nil && st.Stats.PartitionsRunning != 3 {
			err = fmt.Errorf("y runs %d partitions", st.Stats.PartitionsRunning)
		}
		return err
	})
	produceJSON(t, cc.cfg, repeatRating(movie, zombieRatings, 9)...)
	want := testkit.Movie{MovieID: movie, Count: 5 + zombieRatings, Rating: (5*8 + zombieRatings*9) / float64(5+zombieRatings)}
	waitMovie(t, "http://"+y.api, movie1(want), 60*time.Second)
	waitCommitted(t, cc.cfg, cc.cfg.EngineConfig(nil).Topics().Repartition)

	var problems []error
	resume()
	// x finds its session gone and flushes on its way out: under
	// exactly-once the broker refuses that transaction.
	testkit.Eventually(t, 30*time.Second, "x ended its lost session", func() error {
		st, err := stats(x.api)
		if err != nil {
			return err
		}
		// Its late flush was aborted (exactly-once), refused by a shared
		// store's claim check before its transaction began, or wrote
		// documents (at-least-once, where nothing stops it).
		if st.Stats.TransactionsAborted+st.Stats.StoreDocsWritten+st.Stats.FencedWrites <=
			before.Stats.TransactionsAborted+before.Stats.StoreDocsWritten+before.Stats.FencedWrites {
			return fmt.Errorf("x: %+v", st.Stats)
		}
		return nil
	})
	after, err := stats(x.api)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("zombie x after resuming: %+v", after.Stats)
	if after.Stats.TransactionsAborted == 0 && after.Stats.FencedWrites <= before.Stats.FencedWrites {
		problems = append(problems, errors.New("x's late flush was neither aborted nor fenced by the store"))
	}
	if after.Stats.StoreDocsWritten != 0 {
		problems = append(problems, fmt.Errorf("x wrote %d documents to its store after losing the partition", after.Stats.StoreDocsWritten))
	}
	truth := map[int64]testkit.Movie{movie: want}
	if err := diffTopics(t, cc.cfg, truth); err != nil {
		problems = append(problems, fmt.Errorf("after the zombie woke up: %w: %w", errTopicsWrong, err))
	}
	if !full {
		return problems
	}

	// x gets the partitions back, on its own store.
	if err := y.proc.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop y: %v", err)
	}
	if err := x.proc.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop x: %v", err)
	}
	x.extraArgs = g
	cc.start(x)
	cc.waitReady(x, 60*time.Second)
	if got, code, err := getMovie("http://"+x.api, movie); err != nil || got != movie1(want) {
		problems = append(problems, fmt.Errorf("x back as owner serves %d %+v (%v), want %+v", code, got, err, want))
	}
	produceJSON(t, cc.cfg, repeatRating(movie, 1, 10)...)
	want = testkit.Movie{MovieID: movie, Count: want.Count + 1, Rating: (5*8 + zombieRatings*9 + 10) / float64(want.Count+1)}
	truth[movie] = want
	if err := waitFor(60*time.Second, func() error {
		got, code, err := getMovie("http://"+x.api, movie)
		if err == nil && got != movie1(want) {
			err = fmt.Errorf("GET /movies/%d: %d %+v, want %+v", movie, code, got, want)
		}
		return err
	}); err != nil {
		problems = append(problems, fmt.Errorf("after one more rating: %w", err))
	}
	if err := diffTopics(t, cc.cfg, truth); err != nil {
		problems = append(problems, fmt.Errorf("after one more rating: %w", err))
	}
	return problems
}

// errTopicsWrong marks a scenario problem found in the changelog or the
// output topic.
var errTopicsWrong = errors.New("topics wrong")

// movie1 converts a testkit.Movie to the harness's movie JSON.
func movie1(m testkit.Movie) movie {
	return movie{MovieID: m.MovieID, Rating: m.Rating, Count: m.Count}
}

// waitFor polls cond until it returns nil or timeout passes, and returns
// its last error.
func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestE2EZombieIsFenced runs the deterministic zombie scenario under
// exactly-once on both stores: the zombie's flush is aborted, its records
// are invisible to read_committed readers (the last changelog record and
// the last average stay exact), its store is not written, and when it
// owns the partition again it serves and extends the exact count.
func TestE2EZombieIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a process past its session timeout")
	}
	for _, store := range []string{app.StoreClover, app.StoreRedis} {
		t.Run(store, func(t *testing.T) {
			for _, err := range zombieScenario(t, store, "exactly_once", true) {
				t.Error(err)
			}
		})
	}
}

// TestE2EZombieCorruptsAtLeastOnce runs the same scenario under
// at_least_once and requires it to find the corruption exactly-once
// prevents: proof that the scenario above really produces a zombie write.
// The zombie always writes after losing its partitions there; whether that
// write carries a stale count depends on whether it caught up on the new
// owner's records before noticing its session was gone (on Apache Kafka it
// sometimes does), so up to three runs may be needed to see the topics go
// wrong.
func TestE2EZombieCorruptsAtLeastOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a process past its session timeout")
	}
	for run := 1; run <= 3; run++ {
		var problems []error
		t.Run(fmt.Sprintf("run %d", run), func(t *testing.T) {
			problems = zombieScenario(t, app.StoreClover, "at_least_once", false)
		})
		joined := errors.Join(problems...)
		if joined == nil {
			t.Fatal("at_least_once: the zombie did not write after losing its partition: the scenario no longer produces a zombie, so the exactly-once test proves nothing")
		}
		if errors.Is(joined, errTopicsWrong) {
			t.Logf("run %d: at_least_once, as expected, is corrupted by the zombie:\n%v", run, joined)
			return
		}
		t.Logf("run %d: the zombie wrote after losing its partition but happened to carry current counts: %v", run, joined)
	}
	t.Fatal("at_least_once kept the topics exact through the zombie in 3 runs: the scenario no longer produces a stale zombie write")
}
