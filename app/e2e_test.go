package app_test

import (
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestE2EOriginalExample is the original example: two ratings of movie 362
// (10 and 8) give an average of 9.0 with count 2, in the API and on the
// output topic, with either store. It runs on kfake, and on the real broker
// in `make integration`.
func TestE2EOriginalExample(t *testing.T) {
	for _, store := range []string{app.StoreClover, app.StoreRedis} {
		t.Run(store, func(t *testing.T) {
			brokers := testkit.Kafka(t)
			reg := testkit.StartRegistry(t)
			c := testConfig(t, brokers, reg.URL())
			if store == app.StoreRedis {
				useRedis(t, &c)
			}
			in := startInstance(t, c)

			produceJSON(t, c, `{"movie_id":362,"rating":10}`, `{"movie_id":362,"rating":8}`)

			waitMovie(t, in.api, movie{MovieID: 362, Rating: 9.0, Count: 2}, 30*time.Second)
			testkit.Eventually(t, 10*time.Second, "rating-averages holds 362 -> 9.0", func() error {
				if got := readAverages(t, c.Brokers, c.OutputTopic)[362]; got != 9.0 {
					return errorf("average of 362 on %s = %v, want 9.0", c.OutputTopic, got)
				}
				return nil
			})
		})
	}
}

// TestE2EStartFlush: with a commit interval and an idle flush far longer
// than the test, a partition that starts running still writes its first
// record at once (its first batch, and again once it has caught up), so a
// rating held up by a rebalance does not wait for the next commit. Without
// those flushes nothing would be written for 45 s.
func TestE2EStartFlush(t *testing.T) {
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	c := testConfig(t, brokers, reg.URL())
	c.CommitInterval = time.Minute
	c.IdleFlush = 45 * time.Second
	in := startInstance(t, c)
	start := time.Now()

	produceJSON(t, c, `{"movie_id":8,"rating":4}`)

	waitMovie(t, in.api, movie{MovieID: 8, Rating: 4, Count: 1}, 20*time.Second)
	if took := time.Since(start); took >= c.IdleFlush {
		t.Fatalf("results took %v, not less than the idle flush %v", took, c.IdleFlush)
	}
}

// TestE2EIdleFlush: with a commit interval far longer than the test, two
// ratings still reach the API, the output topic and the changelog within
// seconds, because a task whose input has run dry flushes without waiting
// for the interval. Without that, nothing would be written for a minute.
func TestE2EIdleFlush(t *testing.T) {
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	c := testConfig(t, brokers, reg.URL())
	c.CommitInterval = time.Minute
	in := startInstance(t, c)
	start := time.Now()

	produceJSON(t, c, `{"movie_id":7,"rating":6}`, `{"movie_id":7,"rating":9}`)

	waitMovie(t, in.api, movie{MovieID: 7, Rating: 7.5, Count: 2}, 20*time.Second)
	testkit.Eventually(t, 20*time.Second, "the output topic and the changelog hold movie 7", func() error {
		if got := readAverages(t, c.Brokers, c.OutputTopic)[7]; got != 7.5 {
			return errorf("average of 7 on %s = %v, want 7.5", c.OutputTopic, got)
		}
		if got := lastChangelog(t, c)[7]; got.Count != 2 || got.Sum != 15 {
			return errorf("last changelog record of 7: count %d sum %v, want 2 and 15", got.Count, got.Sum)
		}
		return nil
	})
	took := time.Since(start)
	if took >= c.CommitInterval {
		t.Fatalf("results took %v, not less than the commit interval %v", took, c.CommitInterval)
	}
	t.Logf("API, output topic and changelog exact %v after the ratings were produced (commit interval %v)", took, c.CommitInterval)
}
