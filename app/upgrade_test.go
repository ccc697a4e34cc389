package app_test

import (
	"context"
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
	var stats engine.Stats
	if code, err := testkit.GetJSON("http://"+in.api+"/api/stats", &stats); err != nil || code != http.StatusOK {
		t.Fatalf("GET /api/stats: %d %v", code, err)
	}
	if stats.ChangelogRestored != 0 {
		t.Errorf("changelog records replayed after the upgrade: %d, want 0", stats.ChangelogRestored)
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
