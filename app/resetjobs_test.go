package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/movies"
)

// TestE2EResetJobs resets one job of two that share a process and a clover
// store (app.ResetJobs):
//
//   - while the instance runs, the reset is refused (ErrGroupActive) and
//     changes nothing;
//   - a reset wipes that job's table and nothing else (checked in the
//     store itself: the movie job's document survives), and the next start
//     restores the table from the job's changelog, exact;
//   - with reprocess it also deletes the job's changelog and its group's
//     offsets, and the next start recomputes the table from the input:
//     exact in the API and in the new changelog.
func TestE2EResetJobs(t *testing.T) {
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	c := testConfig(t, brokers, reg.URL())
	purchases := testkit.UniqueName(t, "purchases")
	baskets, err := app.NewJob(basketJob(), purchases, "")
	if err != nil {
		t.Fatalf("NewJob: %v", err)
	}
	log := testLogger(t, "reset")
	ctx := context.Background()
	in := startJobs(t, c, app.Movies(), baskets)
	produceJSON(t, c, `{"movie_id":362,"rating":10}`, `{"movie_id":362,"rating":8}`)
	produceRaw(t, brokers, purchases, []byte(`{"shopper":"ann","price":700}`), []byte(`{"shopper":"bob","price":20}`),
		[]byte(`{"shopper":"ann","price":400}`))
	want := map[string]basket{"ann": {Items: 2, Total: 1100}, "bob": {Items: 1, Total: 20}}
	waitMovie(t, in.api, movie{MovieID: 362, Rating: 9.0, Count: 2}, 30*time.Second)
	waitBaskets(t, in.api, want)

	if err := app.ResetJobs(ctx, c, true, log, baskets); !errors.Is(err, app.ErrGroupActive) {
		t.Fatalf("ResetJobs while the instance runs: %v; want ErrGroupActive", err)
	}
	waitBaskets(t, in.api, want) // the refusal changed nothing
	in.stop(t)

	// The stopped member leaves the group as it closes; poll until the
	// broker agrees.
	reset := func(reprocess bool) {
		t.Helper()
		testkit.Eventually(t, 60*time.Second, "ResetJobs succeeds once the instance left", func() error {
			return app.ResetJobs(ctx, c, reprocess, log, baskets)
		})
	}

	t.Run("reset restores the table from its changelog", func(t *testing.T) {
		reset(false)
		s, err := docstore.Open(c.DataDir, docstore.WithFsync(false))
		if err != nil {
			t.Fatal(err)
		}
		tb, err := s.OpenTable(ctx, basketJob().Spec())
		if err != nil {
			s.Close()
			t.Fatal(err)
		}
		_, terr := tb.Get(ctx, []byte("ann"))
		var m movies.Agg
		mt, merr := s.OpenTable(ctx, movies.Spec)
		if merr == nil {
			var d engine.Doc
			if d, merr = mt.Get(ctx, movies.Key(362)); merr == nil {
				m, merr = movies.Values{}.Decode(ctx, "", d.Value)
			}
		}
		s.Close()
		if !errors.Is(terr, engine.ErrNotFound) {
			t.Errorf("the reset job's table still answers ann: %v; want ErrNotFound", terr)
		}
		if merr != nil || m.Count != 2 {
			t.Errorf("the other job's movie 362 = %+v, %v; want it untouched (2 ratings)", m, merr)
		}
		in := startJobs(t, c, app.Movies(), baskets)
		waitBaskets(t, in.api, want)
		waitMovie(t, in.api, movie{MovieID: 362, Rating: 9.0, Count: 2}, 30*time.Second)
		in.stop(t)
	})

	t.Run("reprocess recomputes the table from the input", func(t *testing.T) {
		reset(true)
		topics := c.JobConfig(nil, "baskets", purchases, "").Topics()
		admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
		if err != nil {
			t.Fatal(err)
		}
		listed, err := admin.ListTopics()
		admin.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, topic := range []string{topics.Changelog, topics.Repartition} {
			if _, ok := listed[topic]; ok {
				t.Errorf("topic %s exists after the reprocess reset; want it deleted", topic)
			}
		}
		if _, ok := listed[c.EngineConfig(nil).Topics().Changelog]; !ok {
			t.Errorf("the movie job's changelog is gone; want only the reset job's topics deleted")
		}
		in := startJobs(t, c, app.Movies(), baskets)
		waitBaskets(t, in.api, want)
		testkit.Eventually(t, 20*time.Second, "the recomputed changelog", func() error {
			return basketsChangelog(t, brokers, topics.Changelog, want)
		})
		waitMovie(t, in.api, movie{MovieID: 362, Rating: 9.0, Count: 2}, 30*time.Second)
	})
}

// basketsChangelog compares the last record per key of the baskets job's
// changelog topic with want.
func basketsChangelog(t *testing.T, brokers []string, topic string, want map[string]basket) error {
	last := map[string]basket{}
	for _, m := range readTopic(t, brokers, topic) {
		var b basket
		if err := json.Unmarshal(m.Value, &b); err != nil {
			return fmt.Errorf("changelog record %q: %w", m.Key, err)
		}
		last[string(m.Key)] = b
	}
	for k, w := range want {
		if last[k] != w {
			return fmt.Errorf("changelog %s: got %+v, want %+v", k, last[k], w)
		}
	}
	return nil
}

// waitBaskets waits until /tables/baskets/{key} answers want for every key.
func waitBaskets(t *testing.T, api string, want map[string]basket) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, "baskets exact on /tables/baskets/{key}", func() error {
		for k, w := range want {
			var got struct {
				Value basket `json:"value"`
			}
			code, body := httpGet(api + "/tables/baskets/" + url.PathEscape(k))
			if code != http.StatusOK {
				return fmt.Errorf("%s: %d %s", k, code, body)
			}
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				return err
			}
			if got.Value != w {
				return fmt.Errorf("%s: got %+v, want %+v", k, got.Value, w)
			}
		}
		return nil
	})
}
