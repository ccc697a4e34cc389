package app_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestE2EChangelogLostIsReseeded deletes the changelog topic while the
// instance is stopped: on start the store is kept (its checkpoint is beyond
// the new, empty changelog), the changelog is re-seeded from the store, and
// a later loss of the store restores exactly from that re-seeded changelog.
func TestE2EChangelogLostIsReseeded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs several child processes")
	}
	cc := newChildCluster(t)
	c := cc.cfg
	in := cc.launch("s", true)

	p := produceConfig(c, 3000, 200, 5)
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	truthOf(p, truth, sums)
	if _, err := app.Produce(t.Context(), p, nil); err != nil {
		t.Fatal(err)
	}
	exact := func(what string) {
		t.Helper()
		testkit.Eventually(t, 60*time.Second, what, func() error {
			got, err := allMovies(in.api)
			if err != nil {
				return err
			}
			return sameMovies(got, truth)
		})
	}
	exact("all ratings in the store")
	if err := in.proc.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	changelog := c.ApplicationID + "-movie-stats-changelog"
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	admin, err := sarama.NewClusterAdmin(c.Brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteTopic(changelog); err != nil {
		t.Fatalf("delete %s: %v", changelog, err)
	}
	testkit.Eventually(t, 60*time.Second, "changelog deleted", func() error {
		topics, err := admin.ListTopics()
		if err != nil {
			return err
		}
		if _, ok := topics[changelog]; ok {
			return fmt.Errorf("%s still listed", changelog)
		}
		return nil
	})

	cc.start(in)
	cc.waitReady(in, 60*time.Second)
	exact("store kept after the changelog was lost")
	if !strings.Contains(in.proc.Output(), "re-seeding the changelog") {
		t.Errorf("no log line about re-seeding the changelog")
	}
	testkit.Eventually(t, 30*time.Second, "changelog re-seeded", func() error {
		if n := len(readTopic(t, c.Brokers, changelog)); n < len(truth) {
			return fmt.Errorf("%d changelog records, want at least %d", n, len(truth))
		}
		return nil
	})

	if err := in.proc.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	loseStore(t, in)
	cc.start(in)
	cc.waitReady(in, 60*time.Second)
	exact("restored from the re-seeded changelog")
}
