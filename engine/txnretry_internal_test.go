package engine

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestTxnProduceFollowsMovedLeader: a transactional producer sends to a
// partition whose leader moved since its last send. Its metadata still
// names the old leader, which refuses the batch (NOT_LEADER_OR_FOLLOWER);
// sarama looks the leader up and the retry reaches the new one after
// txnFirstRetryBackoff, not after the failover pacing (txnProduceBackoff),
// which the send took before.
func TestTxnProduceFollowsMovedLeader(t *testing.T) {
	k := testkit.StartKfake(t, testkit.WithBrokers(2), testkit.WithTopics(1, "t"))
	cfg := DefaultConfig()
	cfg.Brokers = k.Brokers()
	e, err := NewJob(cfg, nopTable{}, benchJob())
	if err != nil {
		t.Fatal(err)
	}
	pr, err := e.newTxnProducer(context.Background(), "moved-leader", "-t")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pr.Close() }()
	send := func() time.Duration {
		t.Helper()
		if err := pr.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, _, err := pr.SendMessage(&sarama.ProducerMessage{Topic: "t", Partition: 0, Value: sarama.StringEncoder("x")})
		took := time.Since(start)
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		if err := pr.CommitTxn(); err != nil {
			t.Fatal(err)
		}
		return took
	}
	send() // the producer learns the leader
	c, err := sarama.NewClient(k.Brokers(), NewSaramaConfig("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	leader, err := c.Leader("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Cluster().MoveTopicPartition("t", 0, 1-leader.ID()); err != nil {
		t.Fatal(err)
	}
	if took := send(); took >= txnProduceBackoff {
		t.Errorf("a send to a moved leader took %v, want under the failover pacing %v (first retry after %v)", took, txnProduceBackoff, txnFirstRetryBackoff)
	}
}
