package app_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// movieLayoutRev is the last revision that kept the movie job in the movie
// layout of the stores (before every job was a table).
const movieLayoutRev = "fd18ca1533569df28d7c11f0274c606971039bd5"

// runUpgradeTest counts ratings with the build of movieLayoutRev, stops
// it, and starts today's build on the same store and Kafka: the store is
// migrated into the table movies and every movie answers exactly, with no
// changelog record replayed. Then more ratings are counted on top.
func runUpgradeTest(t *testing.T, store string) {
	if testing.Short() {
		t.Skip("builds an earlier version")
	}
	const movies, seed = 500, 7
	old := testkit.KeepstateAt(t, movieLayoutRev)
	cc := newChildCluster(t)
	if store == app.StoreRedis {
		useRedis(t, &cc.cfg)
	}
	c := cc.cfg
	newBin := cc.bin

	cc.bin = old
	in := cc.launch("old", true)
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	p := produceConfig(c, 6000, movies, seed)
	if n, err := app.Produce(context.Background(), p, nil); err != nil || n != p.Count {
		t.Fatalf("produce: %d ratings, %v", n, err)
	}
	truthOf(p, truth, sums)
	waitAllExact(t, in.api, truth)
	if err := in.proc.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop the earlier version: %v", err)
	}

	cc.bin = newBin
	cc.start(in)
	cc.waitReady(in, 60*time.Second)
	got, err := allMovies(in.api)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range truth {
		if got[id] != want {
			t.Errorf("movie %d after the upgrade: got %+v, want %+v", id, got[id], want)
		}
	}
	if len(got) != len(truth) {
		t.Errorf("after the upgrade: %d movies, want %d", len(got), len(truth))
	}
	var stats testkit.APIStats[engine.Stats]
	if code, err := testkit.GetJSON("http://"+in.api+"/api/stats", &stats); err != nil || code != http.StatusOK {
		t.Fatalf("GET /api/stats: %d %v", code, err)
	}
	if n := stats.Stats.ChangelogRestored; n != 0 {
		t.Errorf("changelog records replayed after the upgrade: %d, want 0", n)
	}

	p = produceConfig(c, 2000, movies, seed+1)
	if n, err := app.Produce(context.Background(), p, nil); err != nil || n != p.Count {
		t.Fatalf("produce after the upgrade: %d ratings, %v", n, err)
	}
	truthOf(p, truth, sums)
	waitAllExact(t, in.api, truth)
	t.Logf("%d movies exact across the upgrade", len(truth))
}

// TestE2EUpgradeFromMovieLayoutClover: a clover data directory of the
// movie layout opens in today's build without a replay.
func TestE2EUpgradeFromMovieLayoutClover(t *testing.T) { runUpgradeTest(t, app.StoreClover) }

// TestE2EUpgradeFromMovieLayoutRedis: a Redis database of the movie layout
// opens in today's build without a replay.
func TestE2EUpgradeFromMovieLayoutRedis(t *testing.T) { runUpgradeTest(t, app.StoreRedis) }

// preAssignorRev is the last revision whose group ran sarama's range
// assignment, without standbys.
const preAssignorRev = "b9793704687b6dc6cb10390faf9a04ecfc99ba3f"

// TestE2ERollingUpgradeMixedMembers upgrades a running group of two
// instances, one at a time, from a build without keepstate's assignor:
// while the members differ the group agrees on range assignment (the old
// build's); once both run today's build it runs keepstate's, with
// standbys. Ratings flow throughout and every output is exact at the end.
func TestE2ERollingUpgradeMixedMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an earlier version")
	}
	const movies = 600
	old := testkit.KeepstateAt(t, preAssignorRev)
	cc := newChildCluster(t)
	c := cc.cfg
	newBin := cc.bin
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	produce := producerInto(t, c, movies, truth, sums)

	cc.bin = old
	a, b := cc.newInstance("a", true), cc.newInstance("b", true)
	for _, in := range []*crashInstance{a, b} {
		cc.start(in)
	}
	for _, in := range []*crashInstance{a, b} {
		cc.waitReady(in, 60*time.Second)
	}
	produce(3000, 1)
	waitOutputsExact(t, c, "http://"+a.api, truth, "all on the earlier build")

	cc.bin = newBin
	for i, in := range []*crashInstance{a, b} {
		if err := in.proc.Stop(30 * time.Second); err != nil {
			t.Fatalf("stop %s: %v", in.name, err)
		}
		produce(1000, uint64(10+i)) // while it is down
		cc.start(in)
		cc.waitReady(in, 60*time.Second)
		produce(1000, uint64(20+i))
		for _, q := range []*crashInstance{a, b} {
			waitOutputsExact(t, c, "http://"+q.api, truth, fmt.Sprintf("%d of 2 upgraded, asked on %s", i+1, q.name))
		}
		if i == 0 {
			if st, err := stats(a.api); err != nil || st.Stats.PartitionsStandby != 0 {
				t.Errorf("mixed group: the upgraded member keeps %d standbys (%v), want none (range assignment)", st.Stats.PartitionsStandby, err)
			}
		}
	}
	testkit.Eventually(t, 60*time.Second, "standbys once every member is upgraded", func() error {
		var sum int64
		for _, in := range []*crashInstance{a, b} {
			st, err := stats(in.api)
			if err != nil {
				return err
			}
			sum += st.Stats.PartitionsStandby
		}
		if sum != 3 {
			return fmt.Errorf("%d standbys in all, want 3 (one per partition)", sum)
		}
		return nil
	})
	produce(2000, 30)
	for _, q := range []*crashInstance{a, b} {
		waitOutputsExact(t, c, "http://"+q.api, truth, "after the upgrade, asked on "+q.name)
	}
}
