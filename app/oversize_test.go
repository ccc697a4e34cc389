package app_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/linkedin/goavro/v2"

	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// bigRatingSchema is the Rating schema with one more field, as a newer
// producer might write it: keepstate's reader schema ignores the field.
const bigRatingSchema = `{"namespace":"io.confluent.demo","type":"record","name":"Rating","fields":[
 {"name":"movie_id","type":"long"},{"name":"rating","type":"double"},
 {"name":"review","type":"string","default":""}]}`

// TestE2EOversizedRecordsGoToDLQ sends a 1.5 MiB garbage record and a
// valid rating carrying a 1.2 MiB unknown field between valid ratings.
// Neither can be forwarded within the producer's record limit: each lands
// in the dead-letter topic exactly once, truncated with its original size
// in a header; the valid ratings around them are counted; the group
// session never restarts and /readyz stays 200.
func TestE2EOversizedRecordsGoToDLQ(t *testing.T) {
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	c := testConfig(t, brokers, reg.URL())
	createTopic(t, brokers, c.InputTopic, 3, map[string]string{"max.message.bytes": strconv.Itoa(4 << 20)})
	in := startInstance(t, c)

	ctx := context.Background()
	client, err := avro.NewRegistry(reg.URL())
	if err != nil {
		t.Fatal(err)
	}
	subject := avro.ValueSubject(c.InputTopic)
	valid, err := client.EncodeRating(ctx, subject, avro.Rating{MovieID: 5, Rating: 7})
	if err != nil {
		t.Fatal(err)
	}
	id, err := client.Register(ctx, subject, bigRatingSchema)
	if err != nil {
		t.Fatalf("register the wider schema: %v", err)
	}
	codec, err := goavro.NewCodec(bigRatingSchema)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := codec.BinaryFromNative(nil, map[string]any{
		"movie_id": int64(5), "rating": 9.0, "review": string(bytes.Repeat([]byte("x"), 1200<<10))})
	if err != nil {
		t.Fatal(err)
	}
	bigValid := avro.Frame(id, payload)
	garbage := bytes.Repeat([]byte{0xfe}, 1536<<10)
	produceLarge(t, brokers, c.InputTopic, valid, garbage, valid, bigValid, valid)

	waitMovie(t, in.api, movie{MovieID: 5, Rating: 7, Count: 3}, 60*time.Second)
	var dead []sizedDLQRecord
	testkit.Eventually(t, 30*time.Second, "2 dead letters", func() error {
		dead = readDLQWithSizes(t, brokers, c.ApplicationID+"-dlq")
		if len(dead) < 2 {
			return errorf("%d dead letters", len(dead))
		}
		return nil
	})
	if len(dead) != 2 {
		t.Fatalf("got %d dead letters, want exactly 2 (once each)", len(dead))
	}
	sizes := map[int]bool{}
	for _, d := range dead {
		if len(d.value) > engine.MaxRecordBytes || !d.truncated {
			t.Errorf("dead letter of %d bytes (truncated %v), want at most %d and truncated", len(d.value), d.truncated, engine.MaxRecordBytes)
		}
		sizes[d.originalSize] = true
		t.Logf("dead letter: original %d bytes, kept %d, reason %q", d.originalSize, len(d.value), d.reason)
	}
	if !sizes[len(garbage)] || !sizes[len(bigValid)] {
		t.Errorf("original sizes %v, want %d and %d", sizes, len(garbage), len(bigValid))
	}
	st, err := stats(in.api[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	if st.Stats.GroupRestarts != 0 || !st.Ready {
		t.Errorf("group restarts %d, ready %v (%s): want 0 and ready", st.Stats.GroupRestarts, st.Ready, st.Reason)
	}
}

// createTopic creates topic with n partitions and the given configs.
func createTopic(t *testing.T, brokers []string, topic string, n int32, configs map[string]string) {
	t.Helper()
	admin := testAdmin(t, brokers)
	entries := map[string]*string{}
	for k, v := range configs {
		entries[k] = &v
	}
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: n, ReplicationFactor: 1, ConfigEntries: entries}, false); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// produceLarge sends values (up to 4 MiB each) to partition 0 of topic, in order.
func produceLarge(t *testing.T, brokers []string, topic string, values ...[]byte) {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	sc.Producer.Return.Successes = true
	sc.Producer.MaxMessageBytes = 4 << 20
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(brokers, sc)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer p.Close()
	for _, v := range values {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(v)}); err != nil {
			t.Fatalf("send %d bytes: %v", len(v), err)
		}
	}
}

// sizedDLQRecord is a dead letter with its truncation headers.
type sizedDLQRecord struct {
	dlqRecord
	truncated    bool
	originalSize int
}

func readDLQWithSizes(t *testing.T, brokers []string, topic string) []sizedDLQRecord {
	t.Helper()
	var out []sizedDLQRecord
	for _, m := range readTopic(t, brokers, topic) {
		r := sizedDLQRecord{dlqRecord: dlqRecord{value: m.Value}}
		for _, h := range m.Headers {
			switch string(h.Key) {
			case engine.HeaderDLQReason:
				r.reason = string(h.Value)
			case engine.HeaderDLQTruncated:
				r.truncated = string(h.Value) == "true"
			case engine.HeaderDLQOriginalSize:
				r.originalSize, _ = strconv.Atoi(string(h.Value))
			}
		}
		out = append(out, r)
	}
	return out
}
