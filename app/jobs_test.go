package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// purchase and basket are a second job beside the movie job: JSON
// purchases totalled per shopper.
type purchase struct {
	Shopper string  `json:"shopper"`
	Price   float64 `json:"price"`
}

type basket struct {
	Items int64   `json:"items"`
	Total float64 `json:"total"`
}

func basketJob() engine.Job[string, purchase, basket] {
	return engine.Job[string, purchase, basket]{
		Name:    "baskets",
		Decode:  engine.JSON[purchase](),
		Key:     func(p purchase) (string, error) { return engine.StringKeys.Parse(p.Shopper) },
		Keys:    engine.StringKeys,
		Add:     func(b *basket, p purchase) { b.Items++; b.Total += p.Price },
		Indexes: []engine.Index[basket]{engine.NumberIndex("total", func(b basket) float64 { return b.Total })},
	}
}

// TestE2ETwoJobsOneProcess runs the movie job and a second job in one
// process on each store: each job reads its own input, keeps its own
// table and internal topics, and answers on its own routes.
func TestE2ETwoJobsOneProcess(t *testing.T) {
	for _, store := range []string{app.StoreClover, app.StoreRedis} {
		t.Run(store, func(t *testing.T) {
			brokers := testkit.Kafka(t)
			reg := testkit.StartRegistry(t)
			c := testConfig(t, brokers, reg.URL())
			if store == app.StoreRedis {
				useRedis(t, &c)
			}
			purchases := testkit.UniqueName(t, "purchases")
			job, err := app.NewJob(basketJob(), purchases, "")
			if err != nil {
				t.Fatalf("NewJob: %v", err)
			}
			in := startJobs(t, c, app.Movies(), job)

			produceJSON(t, c, `{"movie_id":362,"rating":10}`, `{"movie_id":362,"rating":8}`)
			produceRaw(t, brokers, purchases, []byte(`{"shopper":"ann","price":700}`), []byte(`{"shopper":"bob","price":20}`),
				[]byte(`{"shopper":"ann","price":400}`), []byte(`{"shopper":"cy"`))

			waitMovie(t, in.api, movie{MovieID: 362, Rating: 9.0, Count: 2}, 30*time.Second)
			want := map[string]basket{"ann": {Items: 2, Total: 1100}, "bob": {Items: 1, Total: 20}}
			waitBaskets(t, in.api, want)
			code, body := httpGet(in.api + "/tables/baskets?index=total&min=1000")
			var page struct {
				Items []struct {
					Key string `json:"key"`
				} `json:"items"`
			}
			if err := json.Unmarshal([]byte(body), &page); code != http.StatusOK || err != nil || len(page.Items) != 1 || page.Items[0].Key != "ann" {
				t.Errorf("total >= 1000: got %d %s, want ann only", code, body)
			}
			if code, body := httpGet(in.api + "/tables"); code != http.StatusOK || !json.Valid([]byte(body)) {
				t.Errorf("GET /tables: %d %s", code, body)
			}

			// Each job has its own internal topics: the movie job's
			// changelog holds only movies, the second job's only shoppers,
			// and the malformed purchase is on the second job's DLQ.
			topics := c.JobConfig(nil, "baskets", purchases, "").Topics()
			testkit.Eventually(t, 20*time.Second, "the second job's changelog and DLQ", func() error {
				if err := basketsChangelog(t, brokers, topics.Changelog, want); err != nil {
					return err
				}
				if n := len(readTopic(t, brokers, topics.DLQ)); n != 1 {
					return fmt.Errorf("%d dead letters on %s, want 1", n, topics.DLQ)
				}
				return nil
			})
			for _, m := range readTopic(t, brokers, c.EngineConfig(nil).Topics().Changelog) {
				if len(m.Key) != 8 {
					t.Errorf("movie changelog holds key %q: want only 8-byte movie ids", m.Key)
				}
			}
		})
	}
}

// TestRunJobsRefusesBadJobs checks the job list before connecting.
func TestRunJobsRefusesBadJobs(t *testing.T) {
	bad := basketJob()
	bad.Add = nil
	if _, err := app.NewJob(bad, "in", ""); !errors.Is(err, app.ErrConfig) {
		t.Errorf("NewJob without Add: got %v, want ErrConfig", err)
	}
	if _, err := app.NewJob(basketJob(), "", ""); !errors.Is(err, app.ErrConfig) {
		t.Errorf("NewJob without input: got %v, want ErrConfig", err)
	}
	if _, err := app.NewJob(basketJob(), "in", "out"); !errors.Is(err, app.ErrConfig) {
		t.Errorf("NewJob with an output topic but no Output: got %v, want ErrConfig", err)
	}
	job, err := app.NewJob(basketJob(), "in", "")
	if err != nil {
		t.Fatalf("NewJob: %v", err)
	}
	c := app.Default()
	c.DataDir = t.TempDir()
	for name, jobs := range map[string][]app.Job{"none": nil, "twice": {job, job}, "zero": {{}}} {
		if err := app.RunJobs(context.Background(), c, nil, nil, jobs...); !errors.Is(err, app.ErrConfig) {
			t.Errorf("RunJobs(%s): got %v, want ErrConfig", name, err)
		}
	}
}

// startJobs runs app.RunJobs until the test ends and waits until /readyz is 200.
func startJobs(t *testing.T, c app.Config, jobs ...app.Job) *instance {
	t.Helper()
	log := testLogger(t, c.ApplicationID)
	return startRun(t, func(ctx context.Context, ready func(string)) error { return app.RunJobs(ctx, c, log, ready, jobs...) })
}
