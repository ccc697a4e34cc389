package app_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestE2ECorruptStore damages the clover store of a stopped instance (4
// KiB of garbage in its largest table file, as a bad disk or a bad copy
// would) and starts it again, twice:
//
//   - with --on-store-corrupt=stop, Run returns an error wrapping
//     engine.ErrCorrupt that names the flag, and leaves the files;
//   - with the default (rebuild), the next start wipes the store the
//     earlier run condemned and restores it from the changelog;
//   - damaged again, the default start meets the damage while it runs,
//     stops its jobs, wipes the store and runs again on the same API
//     address, restoring from the changelog.
//
// Each time, ratings produced meanwhile are counted exactly once on every
// output: the last changelog record and average of every movie, and the
// API.
func TestE2ECorruptStore(t *testing.T) {
	if testing.Short() {
		t.Skip("restores a store three times")
	}
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	c := testConfig(t, brokers, reg.URL())
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	produce := producerInto(t, c, 4000, truth, sums)
	in := startInstance(t, c)
	produce(16000, 31)
	waitOutputsExact(t, c, in.api, truth, "before any damage")
	in.stop(t)
	testkit.DamageStore(t, c.DataDir)

	t.Run("stop", func(t *testing.T) {
		cs := c
		cs.OnStoreCorrupt = app.CorruptStop
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		err := app.Run(ctx, cs, testLogger(t, "stop"), nil)
		if !errors.Is(err, engine.ErrCorrupt) || !strings.Contains(err.Error(), "--on-store-corrupt") {
			t.Fatalf("Run on a damaged store with --on-store-corrupt=stop: %v; want ErrCorrupt naming the flag", err)
		}
		if _, err := os.Stat(filepath.Join(c.DataDir, "store")); err != nil {
			t.Errorf("store files after the stop: %v; want them left for inspection", err)
		}
	})

	t.Run("rebuild at the next start", func(t *testing.T) {
		in := startInstance(t, c)
		produce(4000, 32)
		st := waitOutputsExact(t, c, in.api, truth, "after the rebuild at start")
		if st.Stats.ChangelogRestored < int64(len(truth))/2 {
			t.Errorf("restored %d changelog records; want the store rebuilt from the changelog (%d movies)", st.Stats.ChangelogRestored, len(truth))
		}
		in.stop(t)
	})

	t.Run("rebuild while running", func(t *testing.T) {
		testkit.DamageStore(t, c.DataDir)
		in := startInstance(t, c)
		produce(4000, 33)
		// Reading every movie (waitOutputsExact does) meets the damage if
		// the write cache's warm-up did not; either condemns the store.
		st := waitOutputsExact(t, c, in.api, truth, "after the rebuild while running")
		if st.Stats.ChangelogRestored < int64(len(truth))/2 {
			t.Errorf("restored %d changelog records; want the store rebuilt from the changelog (%d movies)", st.Stats.ChangelogRestored, len(truth))
		}
		if _, err := os.Stat(filepath.Join(c.DataDir, "CORRUPT")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("corruption marker after the rebuild: %v; want none", err)
		}
		in.stop(t)
	})
}
