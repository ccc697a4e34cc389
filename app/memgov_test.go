package app_test

import (
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestE2EMemoryGovernor runs the movie job under --memory-limit-mib 300:
// Go's memory limit is the limit less the binary's 48 MiB and 3 %
// headroom (the store's caches are in Go's heap), the memory governor
// grows the automatic cache budget from the plan's 29160 documents to the
// engine's default while the live heap is small, and the counts stay
// exact in the API, the last changelog record per movie and the output
// topic while it moves the budget under the running engine.
func TestE2EMemoryGovernor(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	c := testConfig(t, brokers, reg.URL())
	c.MemoryLimitMiB = 300
	logs := &testkit.SyncBuffer{}
	in := startInstanceLog(t, c, logs.Logger())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("instance log:\n%s", logs.String())
		}
	})

	const goMiB = 300 - 48 - 9
	if got := debug.SetMemoryLimit(-1) >> 20; got != goMiB {
		t.Errorf("Go's memory limit %d MiB; want %d", got, goMiB)
	}
	testkit.Eventually(t, 10*time.Second, "the governor grows the cache budget", func() error {
		if !strings.Contains(logs.String(), "cache budget re-planned") || !strings.Contains(logs.String(), "cache_budget_docs=30000") {
			return fmt.Errorf("no cache budget re-planned to 30000 in the log")
		}
		return nil
	})

	var lines []string
	want := map[int64][2]float64{} // count, sum
	for i := range 300 {
		id, r := int64(i%60+1), float64(i%10+1)
		lines = append(lines, fmt.Sprintf(`{"movie_id":%d,"rating":%v}`, id, r))
		w := want[id]
		want[id] = [2]float64{w[0] + 1, w[1] + r}
	}
	produceJSON(t, c, lines...)
	for id, w := range want {
		waitMovie(t, in.api, movie{MovieID: id, Rating: w[1] / w[0], Count: int64(w[0])}, 30*time.Second)
	}
	testkit.Eventually(t, 20*time.Second, "the changelog and the output topic are exact", func() error {
		last, avgs := lastChangelog(t, c), readAverages(t, c.Brokers, c.OutputTopic)
		for id, w := range want {
			if got := last[id]; float64(got.Count) != w[0] || got.Sum != w[1] {
				return fmt.Errorf("last changelog record of %d: count %d sum %v, want %v and %v", id, got.Count, got.Sum, w[0], w[1])
			}
			if got := avgs[id]; got != w[1]/w[0] {
				return fmt.Errorf("average of %d on %s = %v, want %v", id, c.OutputTopic, got, w[1]/w[0])
			}
		}
		return nil
	})
}
