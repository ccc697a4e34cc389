package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"

	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/internal/testkit"
)

// evolvedRatingSchema is the rating schema with a field added, as a
// producer that upgraded would write it: a new schema id, which an
// instance has not seen and must fetch from the registry.
const evolvedRatingSchema = `{"namespace":"io.confluent.demo","type":"record","name":"Rating","fields":[
	{"name":"movie_id","type":"long"},{"name":"rating","type":"double"},{"name":"source","type":"string","default":""}]}`

// TestE2ERegistryOutageExact takes the Schema Registry down (every request
// answered 503) just before ratings written with a schema id the instance
// has not seen arrive, and keeps it down for longer than the transaction
// timeout. The instance must neither dead-letter those ratings (the
// registry being down says nothing about the record) nor lose or double
// them: it retries, and once the registry is back it ends exact on every
// output (changelog, output topic, API) with an empty DLQ. Meanwhile the
// API keeps answering what the store holds.
func TestE2ERegistryOutageExact(t *testing.T) {
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	var down atomic.Bool
	var refused, asked atomic.Int64
	reg.Fake().Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if !down.Load() {
			return false
		}
		refused.Add(1)
		if strings.HasPrefix(r.URL.Path, "/schemas/ids/") {
			asked.Add(1)
		}
		http.Error(w, `{"error_code":50301,"message":"injected outage"}`, http.StatusServiceUnavailable)
		return true
	})
	c := testConfig(t, brokers, reg.URL())
	c.TransactionTimeout = 3 * time.Second
	in := startInstance(t, c)
	produceJSON(t, c, `{"movie_id":362,"rating":10}`, `{"movie_id":362,"rating":8}`)
	waitMovie(t, in.api, movie{MovieID: 362, Rating: 9.0, Count: 2}, 30*time.Second)

	// The new schema is registered while the registry is up (by the
	// upgraded producer); the instance learns of it only from the records.
	ctx := context.Background()
	client, err := avro.NewRegistry(reg.URL())
	if err != nil {
		t.Fatal(err)
	}
	id, err := client.Register(ctx, avro.ValueSubject(c.InputTopic), evolvedRatingSchema)
	if err != nil {
		t.Fatalf("register the evolved schema: %v", err)
	}
	codec, err := goavro.NewCodec(evolvedRatingSchema)
	if err != nil {
		t.Fatal(err)
	}
	var records [][]byte
	for _, r := range []struct {
		movie  int64
		rating float64
	}{{362, 6}, {7, 4}, {7, 5}, {362, 4}} {
		payload, err := codec.BinaryFromNative(nil, map[string]any{"movie_id": r.movie, "rating": r.rating, "source": "app-v2"})
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, avro.Frame(id, payload))
	}

	down.Store(true)
	defer down.Store(false) // a failing test still stops cleanly
	cut := time.Now()
	produceRaw(t, brokers, c.InputTopic, records...)
	testkit.Eventually(t, 30*time.Second, "the instance asks the registry for the new schema", func() error {
		if asked.Load() < 2 {
			return fmt.Errorf("asked %d times", asked.Load())
		}
		return nil
	})
	outage := 7 * time.Second // > the transaction timeout
	for time.Since(cut) < outage {
		// The fault's duration, not synchronisation: the API is asked
		// throughout it and answers what the store holds.
		got, code, err := getMovie(in.api, 362)
		if err != nil || code != http.StatusOK || got.Count != 2 {
			t.Fatalf("GET /movies/362 during the registry outage: %d %+v, %v; want 200 and the 2 ratings before it", code, got, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	down.Store(false)

	truth := map[int64]testkit.Movie{
		362: {MovieID: 362, Rating: (10 + 8 + 6 + 4) / 4.0, Count: 4},
		7:   {MovieID: 7, Rating: 4.5, Count: 2},
	}
	st := waitOutputsExact(t, c, in.api, truth, "after a registry outage")
	if n := len(readTopic(t, brokers, c.EngineConfig(nil).Topics().DLQ)); n != 0 || st.Stats.DeadLettered != 0 {
		t.Errorf("%d records on the DLQ (stats: %d); want none: a registry outage is not the record's fault", n, st.Stats.DeadLettered)
	}
	t.Logf("outage %v: %d registry requests refused, %d of them for a schema by id; %d transactions aborted, %d group restarts",
		outage, refused.Load(), asked.Load(), st.Stats.TransactionsAborted, st.Stats.GroupRestarts)
}
