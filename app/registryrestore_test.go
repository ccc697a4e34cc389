package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestE2ERegistryDownDuringRestore starts an instance with a new store
// while the Schema Registry fails every schema lookup by id (as it does
// when its backing topic is unavailable) but still answers the start's
// health check. The restore must read the changelog, whose values are Avro
// under a schema id this new process has never seen, so it cannot decode a
// single record until the lookups work again.
// The restore must wait for the registry, not skip the records: skipping
// would finish the restore with an empty partition, move its checkpoint
// past the records, and count every later rating from zero. Meanwhile the
// API must not answer a count it has not restored. Once the registry is
// back the instance ends exact on the API, the last changelog record per
// movie and the output topic, with no changelog record skipped.
func TestE2ERegistryDownDuringRestore(t *testing.T) {
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	var down atomic.Bool
	var asked atomic.Int64
	reg.Fake().Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if !down.Load() || !strings.HasPrefix(r.URL.Path, "/schemas/ids/") {
			return false
		}
		asked.Add(1)
		http.Error(w, `{"error_code":50301,"message":"injected outage"}`, http.StatusServiceUnavailable)
		return true
	})
	c := testConfig(t, brokers, reg.URL())
	a := startInstance(t, c)
	produceJSON(t, c, `{"movie_id":362,"rating":10}`, `{"movie_id":362,"rating":8}`, `{"movie_id":7,"rating":4}`)
	waitMovie(t, a.api, movie{MovieID: 362, Rating: 9.0, Count: 2}, 30*time.Second)
	waitMovie(t, a.api, movie{MovieID: 7, Rating: 4.0, Count: 1}, 30*time.Second)
	a.stop(t)

	down.Store(true)
	defer down.Store(false) // a failing test still stops cleanly
	c.DataDir = t.TempDir() // a new store: everything comes from the changelog
	b := launchInstance(t, c)
	testkit.Eventually(t, 30*time.Second, "the restore asks the registry for the changelog's schema", func() error {
		if n := asked.Load(); n < 2 {
			return fmt.Errorf("asked %d times", n)
		}
		return nil
	})
	outage := 3 * time.Second
	for cut := time.Now(); time.Since(cut) < outage; {
		// The fault's duration, not synchronisation: the API is asked
		// throughout it and must not answer what it has not restored.
		if got, code, err := getMovie(b.api, 362); err == nil && code == http.StatusOK && got.Count != 2 {
			t.Fatalf("GET /movies/362 while the registry is down: 200 with %+v; want the 2 ratings before the restart or no answer", got)
		}
		time.Sleep(250 * time.Millisecond)
	}
	down.Store(false)

	produceJSON(t, c, `{"movie_id":362,"rating":6}`)
	truth := map[int64]testkit.Movie{
		362: {MovieID: 362, Rating: 8.0, Count: 3},
		7:   {MovieID: 7, Rating: 4.0, Count: 1},
	}
	st := waitOutputsExact(t, c, b.api, truth, "after a registry outage during a restore")
	if st.Stats.ChangelogSkipped != 0 {
		t.Errorf("changelogSkipped = %d, want 0: an unavailable registry says nothing about the records", st.Stats.ChangelogSkipped)
	}
	if st.Stats.ChangelogRestored == 0 {
		t.Error("changelogRestored = 0: the new store was not restored from the changelog")
	}
	t.Logf("%d registry requests for a schema by id refused; %d changelog records restored", asked.Load(), st.Stats.ChangelogRestored)
}
