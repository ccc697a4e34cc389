package app_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// truthOf replays the generator of p and returns every movie's exact state.
func truthOf(p app.ProduceConfig, into map[int64]testkit.Movie, sums map[int64]float64) {
	g := app.NewGenerator(p.Movies, p.Seed)
	for i := int64(0); i < p.Count; i++ {
		r := g.Next()
		m := into[r.MovieID]
		m.MovieID = r.MovieID
		m.Count++
		sums[r.MovieID] += r.Rating
		m.Rating = sums[r.MovieID] / float64(m.Count)
		into[r.MovieID] = m
	}
}

// TestE2ERedisOutage stops redis-server for 10 s in the middle of a
// stream: the instance answers 503 meanwhile (readiness and queries),
// does not crash, and ends with exact counts once Redis is back. Then
// Redis comes back without its data: the state is restored from the
// changelog and counts are exact again.
func TestE2ERedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 10 s outage")
	}
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	c := testConfig(t, brokers, reg.URL())
	r := testkit.StartRedis(t, testkit.WithRedisPersistence(testkit.RedisAOF))
	c.Store, c.RedisURL = app.StoreRedis, r.URL()
	in := startInstance(t, c)

	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	p := produceConfig(c, 20000, 500, 11)
	p.Rate = 1000
	truthOf(p, truth, sums)
	produced := make(chan error, 1)
	go func() { _, err := app.Produce(context.Background(), p, nil); produced <- err }()

	testkit.Eventually(t, 30*time.Second, "processing under way", func() error {
		if _, code, _ := getMovie(in.api, 2); code != http.StatusOK {
			return fmt.Errorf("movie 2: %d", code)
		}
		return nil
	})
	if err := r.Stop(); err != nil {
		t.Fatalf("stop redis: %v", err)
	}
	down := time.Now()
	var saw503Ready, saw503Query bool
	testkit.Eventually(t, 9*time.Second, "503s during the outage", func() error {
		if code, _ := httpGet(in.api + "/readyz"); code == http.StatusServiceUnavailable {
			saw503Ready = true
		}
		resp, err := http.Get(in.api + "/movies/2")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
				saw503Query = true
			}
		}
		if !saw503Ready || !saw503Query {
			return fmt.Errorf("readyz 503 seen: %v, query 503 with Retry-After seen: %v", saw503Ready, saw503Query)
		}
		return nil
	})
	if d := 10*time.Second - time.Since(down); d > 0 {
		time.Sleep(d) // the outage lasts 10 s: this is the scenario, not synchronisation
	}
	if err := r.Start(); err != nil {
		t.Fatalf("start redis: %v", err)
	}
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	checkExact := func(what string) {
		testkit.Eventually(t, 90*time.Second, what, func() error {
			got, err := allMovies(in.api[len("http://"):])
			if err != nil {
				return err
			}
			return sameMovies(got, truth)
		})
		if code, body := httpGet(in.api + "/readyz"); code != http.StatusOK {
			t.Errorf("%s: readyz %d %s", what, code, body)
		}
	}
	checkExact("exact counts after the outage")

	if err := r.RestartEmpty(); err != nil {
		t.Fatalf("restart redis empty: %v", err)
	}
	p2 := p
	p2.Count, p2.Seed, p2.Rate = 2000, 12, 0
	truthOf(p2, truth, sums)
	if _, err := app.Produce(context.Background(), p2, nil); err != nil {
		t.Fatalf("produce: %v", err)
	}
	checkExact("exact counts after Redis lost its data")
}
