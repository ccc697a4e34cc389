package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/internal/testkit/apptest"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// testLogger returns a debug logger whose output is printed, under name,
// only when the test fails.
func testLogger(t *testing.T, name string) *slog.Logger { return testkit.Logger(t, name) }

// testConfig returns app.Default set up for one test (apptest.Config:
// unique topics and group, a fresh data dir, a short commit interval, an
// ephemeral API port) with the registry at registryURL.
func testConfig(t *testing.T, brokers []string, registryURL string) app.Config {
	t.Helper()
	c := apptest.Config(t, app.Default(), brokers, apptest.Names{App: "ks", Input: "ratings", Output: "averages"}, testPeerSecret)
	c.SchemaRegistry = registryURL
	return c
}

// testPeerSecret authenticates routing between the instances of a test.
const testPeerSecret = "test-peer-secret-0123456789"

// instance is one keepstate service run in-process by a test.
type instance struct {
	api    string
	cancel context.CancelFunc
	done   chan error
}

// startInstance runs app.Run until the test ends and waits until /readyz is 200.
func startInstance(t *testing.T, c app.Config) *instance {
	t.Helper()
	return startInstanceLog(t, c, testLogger(t, c.ApplicationID))
}

// startInstanceLog is startInstance with the instance's logs sent to log.
func startInstanceLog(t *testing.T, c app.Config, log *slog.Logger) *instance {
	t.Helper()
	return startRun(t, func(ctx context.Context, ready func(string)) error { return app.Run(ctx, c, log, ready) })
}

// startRun runs run (app.Run or app.RunJobs) until the test ends and waits
// until /readyz is 200.
func startRun(t *testing.T, run func(ctx context.Context, ready func(addr string)) error) *instance {
	t.Helper()
	in := launchRun(t, run)
	testkit.Eventually(t, 30*time.Second, "instance ready", func() error {
		code, body := httpGet(in.api + "/readyz")
		if code != http.StatusOK {
			return fmt.Errorf("readyz %d %s", code, body)
		}
		return nil
	})
	return in
}

// launchInstance runs app.Run with c until the test ends and waits only
// until its API listens (not until it is ready).
func launchInstance(t *testing.T, c app.Config) *instance {
	t.Helper()
	log := testLogger(t, c.ApplicationID)
	return launchRun(t, func(ctx context.Context, ready func(string)) error { return app.Run(ctx, c, log, ready) })
}

// launchRun runs run until the test ends and waits until its API listens.
func launchRun(t *testing.T, run func(ctx context.Context, ready func(addr string)) error) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	in := &instance{cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- run(ctx, func(a string) { addr <- a }) }()
	select {
	case a := <-addr:
		in.api = "http://" + a
	case err := <-in.done:
		cancel()
		t.Fatalf("instance did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("instance did not start listening within 30s")
	}
	t.Cleanup(func() { in.stop(t) })
	return in
}

// stop ends the instance (cleanly) and waits for it.
func (in *instance) stop(t *testing.T) {
	if in.cancel == nil {
		return
	}
	in.cancel()
	in.cancel = nil
	select {
	case err := <-in.done:
		if err != nil {
			t.Errorf("instance ended with error: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Errorf("instance did not stop within 60s")
	}
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// movie is the JSON of GET /movies/{id}.
type movie struct {
	MovieID int64   `json:"movieId"`
	Rating  float64 `json:"rating"`
	Count   int64   `json:"count"`
}

func getMovie(api string, id int64) (movie, int, error) {
	code, body := httpGet(fmt.Sprintf("%s/movies/%d", api, id))
	var m movie
	if code == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			return m, code, fmt.Errorf("decode %q: %w", body, err)
		}
	}
	return m, code, nil
}

// waitMovie polls GET /movies/{id} until it returns want.
func waitMovie(t *testing.T, api string, want movie, timeout time.Duration) {
	t.Helper()
	testkit.Eventually(t, timeout, fmt.Sprintf("movie %d", want.MovieID), func() error {
		got, code, err := getMovie(api, want.MovieID)
		if err != nil {
			return err
		}
		if code != http.StatusOK || got != want {
			return fmt.Errorf("got %d %+v, want %+v", code, got, want)
		}
		return nil
	})
}

// produceJSON sends JSON-lines ratings with app.Produce.
func produceJSON(t *testing.T, c app.Config, lines ...string) {
	t.Helper()
	p := app.DefaultProduce()
	p.Brokers, p.SchemaRegistry, p.Topic = c.Brokers, c.SchemaRegistry, c.InputTopic
	p.Stdin = strings.NewReader(strings.Join(lines, "\n"))
	n, err := app.Produce(context.Background(), p, nil)
	if err != nil || n != int64(len(lines)) {
		t.Fatalf("produce: sent %d of %d: %v", n, len(lines), err)
	}
}

// readTopic returns every committed record of topic, partition by
// partition, as a read_committed consumer must see it. It uses the tests'
// oracle (testkit.ReadCommittedByMarkers), which decides transactions by
// their markers rather than by the broker's aborted-transaction index.
func readTopic(t *testing.T, brokers []string, topic string) []*sarama.ConsumerMessage {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []*sarama.ConsumerMessage
	for _, p := range parts {
		recs, err := testkit.ReadCommittedByMarkers(ctx, client, topic, p)
		if err != nil {
			t.Fatalf("read %s/%d: %v", topic, p, err)
		}
		for _, r := range recs {
			out = append(out, &sarama.ConsumerMessage{Topic: topic, Partition: p, Offset: r.Offset,
				Key: r.Key, Value: r.Value, Headers: r.Headers})
		}
	}
	return out
}

// readAverages reads the output topic and returns the last average per movie.
func readAverages(t *testing.T, brokers []string, topic string) map[int64]float64 {
	t.Helper()
	out := map[int64]float64{}
	for _, m := range readTopic(t, brokers, topic) {
		id, err := engine.Int64Keys.Decode(m.Key)
		if err != nil {
			t.Fatalf("key %x: %v", m.Key, err)
		}
		v, err := engine.DecodeDouble(m.Value)
		if err != nil {
			t.Fatalf("value %x: %v", m.Value, err)
		}
		out[id] = v
	}
	return out
}

// useRedis points c at a fresh redis-server started for the test.
func useRedis(t *testing.T, c *app.Config) {
	r := testkit.StartRedis(t)
	c.Store = app.StoreRedis
	c.RedisURL = r.URL()
}
