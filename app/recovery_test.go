package app_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// sameMovies compares two snapshots of every movie.
func sameMovies(got, want map[int64]testkit.Movie) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d movies, want %d", len(got), len(want))
	}
	for id, w := range want {
		if got[id] != w {
			return fmt.Errorf("movie %d: got %+v, want %+v", id, got[id], w)
		}
	}
	return nil
}

// TestE2ELostStoreAndReprocess: an instance whose data dir was deleted
// replays the whole changelog and ends with exactly the state it had;
// `keepstate reset --reprocess` refuses while the instance runs, and after
// it a start recomputes exactly the same averages from the input.
func TestE2ELostStoreAndReprocess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs several child processes")
	}
	cc := newChildCluster(t)
	c := cc.cfg
	in := cc.launch("l", true)

	p := produceConfig(c, 5000, 300, 3)
	if _, err := app.Produce(t.Context(), p, nil); err != nil {
		t.Fatal(err)
	}
	var want map[int64]testkit.Movie
	testkit.Eventually(t, 60*time.Second, "every rating in the store", func() error {
		var err error
		if want, err = allMovies(in.api); err != nil {
			return err
		}
		var total int64
		for _, m := range want {
			total += m.Count
		}
		if total != p.Count {
			return fmt.Errorf("store counts %d of %d ratings", total, p.Count)
		}
		return nil
	})

	t.Run("lost store restores from the changelog", func(t *testing.T) {
		if err := in.proc.Stop(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		loseStore(t, in)
		cc.start(in)
		cc.waitReady(in, 60*time.Second)
		st, err := stats(in.api)
		if err != nil {
			t.Fatal(err)
		}
		if st.Stats.ChangelogRestored < int64(len(want)) {
			t.Errorf("restored %d changelog records, want at least %d (one per movie)", st.Stats.ChangelogRestored, len(want))
		}
		got, err := allMovies(in.api)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameMovies(got, want); err != nil {
			t.Errorf("after restore: %v", err)
		}
	})

	resetArgs := []string{"reset", "--reprocess", "--brokers", strings.Join(c.Brokers, ","), "--schema-registry", c.SchemaRegistry,
		"--application-id", c.ApplicationID, "--input-topic", c.InputTopic, "--output-topic", c.OutputTopic,
		"--store", c.Store, "--data-dir", in.dataDir, "--redis-url", c.RedisURL}
	t.Run("reset refuses while an instance runs", func(t *testing.T) {
		r := testkit.StartProcess(t, "reset-refused", cc.bin, nil, resetArgs...)
		err := r.Wait(60 * time.Second)
		if err == nil || !strings.Contains(r.Output(), "stop every instance") {
			t.Errorf("reset while running: err %v, output %q; want a refusal", err, r.Output())
		}
	})

	t.Run("reset --reprocess recomputes the same averages", func(t *testing.T) {
		if err := in.proc.Stop(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		// The stopped static member stays in the group until its session
		// times out; reset refuses until then.
		testkit.Eventually(t, 60*time.Second, "reset succeeds", func() error {
			r := testkit.StartProcess(t, "reset", cc.bin, nil, resetArgs...)
			if err := r.Wait(60 * time.Second); err != nil {
				return fmt.Errorf("%v: %s", err, r.Output())
			}
			return nil
		})
		cc.start(in)
		cc.waitReady(in, 60*time.Second)
		testkit.Eventually(t, 60*time.Second, "recomputed averages", func() error {
			got, err := allMovies(in.api)
			if err != nil {
				return err
			}
			return sameMovies(got, want)
		})
	})
}
