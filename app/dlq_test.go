package app_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// produceRaw sends values as they are to topic, round robin over partitions.
func produceRaw(t *testing.T, brokers []string, topic string, values ...[]byte) {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	p, err := sarama.NewSyncProducer(brokers, sc)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer p.Close()
	for _, v := range values {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(v)}); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
}

// dlqRecord is one dead-lettered record as read back from the topic.
type dlqRecord struct {
	reason, topic string
	value         []byte
}

func readDLQ(t *testing.T, brokers []string, topic string) []dlqRecord {
	t.Helper()
	var out []dlqRecord
	for _, m := range readTopic(t, brokers, topic) {
		r := dlqRecord{value: m.Value}
		for _, h := range m.Headers {
			switch string(h.Key) {
			case engine.HeaderDLQReason:
				r.reason = string(h.Value)
			case engine.HeaderDLQTopic:
				r.topic = string(h.Value)
			}
		}
		out = append(out, r)
	}
	return out
}

// TestE2EBadInputGoesToDLQ sends every kind of bad record between valid
// ones: each bad one lands in the dead-letter topic with its reason, every
// valid one is counted, and the instance keeps running.
func TestE2EBadInputGoesToDLQ(t *testing.T) {
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	c := testConfig(t, brokers, reg.URL())
	in := startInstance(t, c)

	ctx := context.Background()
	client, err := avro.NewRegistry(reg.URL())
	if err != nil {
		t.Fatal(err)
	}
	subject := avro.ValueSubject(c.InputTopic)
	enc := func(id int64, r float64) []byte {
		b, err := client.EncodeRating(ctx, subject, avro.Rating{MovieID: id, Rating: r})
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		return b
	}
	valid := enc(7, 6)
	bad := []struct {
		name   string
		value  []byte
		reason string // a word the reason must contain
	}{
		{"garbage bytes", []byte("this is not avro at all"), "framed"},
		{"wrong magic byte", append([]byte{1}, valid[1:]...), "framed"},
		{"unknown schema id", avro.Frame(999999, valid[5:]), "schema"},
		{"truncated avro", valid[:len(valid)-3], "decod"},
		{"rating NaN", enc(7, math.NaN()), "range"},
		{"rating -1", enc(7, -1), "range"},
		{"rating 11", enc(7, 11), "range"},
	}
	var values [][]byte
	for _, b := range bad {
		values = append(values, valid, b.value)
	}
	values = append(values, valid)
	produceRaw(t, brokers, c.InputTopic, values...)

	wantCount := int64(len(bad) + 1)
	waitMovie(t, in.api, movie{MovieID: 7, Rating: 6, Count: wantCount}, 30*time.Second)
	var got []dlqRecord
	testkit.Eventually(t, 20*time.Second, "dead letters", func() error {
		got = readDLQ(t, brokers, c.ApplicationID+"-dlq")
		if len(got) != len(bad) {
			return errorf("%d records in the DLQ, want %d", len(got), len(bad))
		}
		return nil
	})
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			for _, r := range got {
				if string(r.value) == string(b.value) {
					if !strings.Contains(strings.ToLower(r.reason), b.reason) {
						t.Errorf("reason %q does not mention %q", r.reason, b.reason)
					}
					if r.topic != c.InputTopic {
						t.Errorf("source topic header %q, want %q", r.topic, c.InputTopic)
					}
					return
				}
			}
			t.Errorf("record not in the DLQ")
		})
	}
	if code, body := httpGet(in.api + "/healthz"); code != 200 {
		t.Errorf("healthz after bad input: %d %s", code, body)
	}
}
