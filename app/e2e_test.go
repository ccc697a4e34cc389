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
