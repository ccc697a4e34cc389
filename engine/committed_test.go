package engine_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func saramaConfig() *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	return sc
}

// txnProducer opens a transactional producer with a unique id.
func txnProducer(t *testing.T, brokers []string) sarama.SyncProducer {
	t.Helper()
	return txnProducerID(t, brokers, testkit.UniqueName(t, "txn"))
}

// txnProducerID opens a transactional producer with transactional id id;
// opening it fences (and aborts the open transaction of) an earlier one.
func txnProducerID(t *testing.T, brokers []string, id string) sarama.SyncProducer {
	t.Helper()
	sc := saramaConfig()
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	sc.Producer.Transaction.ID = id
	sc.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer(brokers, sc)
	if err != nil {
		t.Fatalf("transactional producer: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// inTxn sends key=value pairs to partition 0 of topic in one transaction
// and commits or aborts it.
func inTxn(t *testing.T, p sarama.SyncProducer, topic string, commit bool, kvs ...string) {
	t.Helper()
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	var msgs []*sarama.ProducerMessage
	for i := 0; i+1 < len(kvs); i += 2 {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(kvs[i]), Value: sarama.StringEncoder(kvs[i+1])})
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("send: %v", err)
	}
	end := p.CommitTxn
	if !commit {
		end = p.AbortTxn
	}
	if err := end(); err != nil {
		t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}

func createTopic(t *testing.T, brokers []string, configs map[string]*string) string {
	t.Helper()
	topic := testkit.UniqueName(t, "committed")
	admin, err := sarama.NewClusterAdmin(brokers, saramaConfig())
	if err != nil {
		t.Fatalf("admin: %v", err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: configs}, false); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	return topic
}

// readAll returns "key=value" of every committed record of partition 0.
func readAll(t *testing.T, brokers []string, topic string) (kvs []string, offsets []int64) {
	t.Helper()
	client, err := sarama.NewClient(brokers, saramaConfig())
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = engine.ReadCommitted(ctx, client, topic, 0, func(r engine.CommittedRecord) error {
		kvs = append(kvs, string(r.Key)+"="+string(r.Value))
		offsets = append(offsets, r.Offset)
		return nil
	})
	if err != nil {
		t.Fatalf("ReadCommitted: %v (it must end at the partition's end, not hang)", err)
	}
	// The tests' oracle, which decides transactions by their markers and
	// not by the broker's aborted-transaction index, must agree.
	recs, err := testkit.ReadCommittedByMarkers(ctx, client, topic, 0)
	if err != nil {
		t.Fatalf("ReadCommittedByMarkers: %v", err)
	}
	var oracle []string
	for _, r := range recs {
		oracle = append(oracle, string(r.Key)+"="+string(r.Value))
	}
	if !same(kvs, oracle) {
		// The log cleaner may have run between the two reads (the
		// compaction test makes it run all the time): the two must agree
		// when read again back to back without a cleaning in between.
		again, _ := readCommittedKVs(ctx, client, topic)
		if same(again, oracle) || !same(again, kvs) {
			t.Logf("the log was compacted between ReadCommitted and the oracle; reading again")
			return readAll(t, brokers, topic)
		}
		t.Errorf("ReadCommitted %v, the marker oracle %v", kvs, oracle)
	}
	return kvs, offsets
}

func same(got, want []string) bool { return fmt.Sprint(got) == fmt.Sprint(want) }

// TestIntegrationReadCommitted checks the restore reader on the three
// shapes a changelog ends in: a commit marker, an aborted transaction, and
// (real broker) gaps left by compaction. It must return every committed
// record once, none of an aborted transaction, and stop at the end.
func TestIntegrationReadCommitted(t *testing.T) {
	brokers := testkit.Kafka(t)

	t.Run("ends in a commit marker", func(t *testing.T) {
		topic := createTopic(t, brokers, nil)
		p := txnProducer(t, brokers)
		inTxn(t, p, topic, true, "a", "1", "b", "2")
		inTxn(t, p, topic, true, "c", "3")
		got, _ := readAll(t, brokers, topic)
		if want := []string{"a=1", "b=2", "c=3"}; !same(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})

	t.Run("ends in an aborted transaction", func(t *testing.T) {
		topic := createTopic(t, brokers, nil)
		p := txnProducer(t, brokers)
		inTxn(t, p, topic, true, "a", "1")
		inTxn(t, p, topic, false, "a", "zombie", "b", "zombie")
		got, _ := readAll(t, brokers, topic)
		if want := []string{"a=1"}; !same(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})

	t.Run("a transaction aborted by fencing", func(t *testing.T) {
		// A zombie's open transaction is aborted when the next owner opens
		// a producer with the same transactional id; the next owner then
		// writes the same keys again. Only the next owner's records count.
		topic := createTopic(t, brokers, nil)
		id := testkit.UniqueName(t, "fenced")
		other := txnProducer(t, brokers)
		zombie := txnProducerID(t, brokers, id)
		inTxn(t, zombie, topic, true, "a", "1")
		if err := zombie.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		if err := zombie.SendMessages([]*sarama.ProducerMessage{
			{Topic: topic, Key: sarama.StringEncoder("b"), Value: sarama.StringEncoder("zombie")},
			{Topic: topic, Key: sarama.StringEncoder("c"), Value: sarama.StringEncoder("zombie")},
		}); err != nil {
			t.Fatal(err)
		}
		inTxn(t, other, topic, true, "x", "1")
		next := txnProducerID(t, brokers, id)
		inTxn(t, next, topic, true, "b", "2", "c", "3")
		inTxn(t, other, topic, true, "x", "2")
		got, _ := readAll(t, brokers, topic)
		if want := []string{"a=1", "x=1", "b=2", "c=3", "x=2"}; !same(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})

	t.Run("an open transaction is waited for", func(t *testing.T) {
		topic := createTopic(t, brokers, nil)
		p := txnProducer(t, brokers)
		inTxn(t, p, topic, true, "a", "1")
		if err := p.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		if err := p.SendMessages([]*sarama.ProducerMessage{{Topic: topic, Key: sarama.StringEncoder("b"), Value: sarama.StringEncoder("2")}}); err != nil {
			t.Fatal(err)
		}
		done := make(chan []string, 1)
		go func() {
			got, _ := readAllNoFatal(brokers, topic)
			done <- got
		}()
		select {
		case got := <-done:
			t.Fatalf("returned %v while a transaction below the end was open", got)
		case <-time.After(500 * time.Millisecond): // it must still be waiting
		}
		if err := p.CommitTxn(); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-done:
			if want := []string{"a=1", "b=2"}; !same(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("still waiting 20 s after the commit")
		}
	})

	t.Run("compaction gaps", func(t *testing.T) {
		if os.Getenv(testkit.KafkaEnv) != "real" {
			t.Skip("kfake does not compact; runs in the integration suite on Apache Kafka")
		}
		str := func(s string) *string { return &s }
		topic := createTopic(t, brokers, map[string]*string{
			"cleanup.policy": str("compact"), "segment.ms": str("500"),
			"min.cleanable.dirty.ratio": str("0.01"), "delete.retention.ms": str("100"), "min.compaction.lag.ms": str("0"),
		})
		p := txnProducer(t, brokers)
		for i := 0; i < 40; i++ {
			inTxn(t, p, topic, true, "hot", strconv.Itoa(i), "k"+strconv.Itoa(i%5), strconv.Itoa(i))
			if i%10 == 9 {
				inTxn(t, p, topic, false, "hot", "aborted")
			}
			time.Sleep(30 * time.Millisecond) // spread the records over several segments
		}
		testkit.Eventually(t, 90*time.Second, "compacted", func() error {
			// Roll the active segment so the cleaner may reach the rest.
			inTxn(t, p, topic, true, "roll", "x")
			got, offsets := readAll(t, brokers, topic)
			if last := offsets[len(offsets)-1]; len(got) > int(last+1)/2 {
				return fmt.Errorf("%d records over %d offsets", len(got), last+1)
			}
			latest := map[string]string{}
			for _, kv := range got {
				for i := 0; i < len(kv); i++ {
					if kv[i] == '=' {
						latest[kv[:i]] = kv[i+1:]
						break
					}
				}
			}
			if latest["hot"] != "39" || latest["k4"] != "39" || latest["k0"] != "35" {
				t.Fatalf("after compaction: latest %v, want hot=39 k4=39 k0=35", latest)
			}
			return nil
		})
	})
}

// readCommittedKVs returns the committed records of topic/0 as key=value.
func readCommittedKVs(ctx context.Context, client sarama.Client, topic string) ([]string, error) {
	var kvs []string
	err := engine.ReadCommitted(ctx, client, topic, 0, func(r engine.CommittedRecord) error {
		kvs = append(kvs, string(r.Key)+"="+string(r.Value))
		return nil
	})
	return kvs, err
}

// readAllNoFatal is readAll for a goroutine (no t.Fatal there).
func readAllNoFatal(brokers []string, topic string) ([]string, error) {
	client, err := sarama.NewClient(brokers, saramaConfig())
	if err != nil {
		return nil, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var kvs []string
	err = engine.ReadCommitted(ctx, client, topic, 0, func(r engine.CommittedRecord) error {
		kvs = append(kvs, string(r.Key)+"="+string(r.Value))
		return nil
	})
	return kvs, err
}
