package engine

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestSaramaConfigBuffersRecords: Config.BufferedRecords is what sarama
// buffers per claimed partition (its ChannelBufferSize), for every client
// the engine opens.
func TestSaramaConfigBuffersRecords(t *testing.T) {
	for _, n := range []int{1, 77, DefaultConfig().BufferedRecords} {
		cfg := DefaultConfig()
		cfg.BufferedRecords = n
		e, err := NewJob(cfg, nopTable{}, benchJob())
		if err != nil {
			t.Fatal(err)
		}
		if got := e.saramaConfig().ChannelBufferSize; got != n {
			t.Errorf("BufferedRecords %d: ChannelBufferSize = %d, want %d", n, got, n)
		}
	}
}

// nopTable is a Table that is never called (NewJob only checks it is set).
type nopTable struct{ Table }

// TestSaramaConfigForCluster: every producer writes with acks=all and
// idempotence; the shared producer retries a produce (refreshing the
// metadata after NOT_LEADER_OR_FOLLOWER) for long enough to see a leader
// fail over, and so does a transactional one while its session lasts; once
// the session ended, a transactional produce spends its last tries without
// a pause, so that no failing send holds the engine's shutdown.
func TestSaramaConfigForCluster(t *testing.T) {
	cfg := DefaultConfig()
	e, err := NewJob(cfg, nopTable{}, benchJob())
	if err != nil {
		t.Fatal(err)
	}
	const failover = 9 * time.Second // Kafka's broker.session.timeout.ms default
	for name, sc := range map[string]*sarama.Config{
		"base":          e.saramaConfig(),
		"transactional": e.txnProducerConfig("id", "-x", newTxnRetry(context.Background())),
	} {
		if sc.Producer.RequiredAcks != sarama.WaitForAll || !sc.Producer.Idempotent {
			t.Errorf("%s: acks %v idempotent %v, want WaitForAll and true", name, sc.Producer.RequiredAcks, sc.Producer.Idempotent)
		}
		if err := sc.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	base := e.saramaConfig()
	if span := time.Duration(base.Producer.Retry.Max) * base.Producer.Retry.Backoff; span < failover {
		t.Errorf("shared producer: produce retries span %v, want >= %v", span, failover)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tx := e.txnProducerConfig("id", "-x", newTxnRetry(ctx))
	span := func() (d time.Duration) {
		for i := 1; i <= tx.Producer.Retry.Max; i++ {
			d += tx.Producer.Retry.BackoffFunc(i, tx.Producer.Retry.Max)
		}
		return d
	}
	if got := span(); got < failover {
		t.Errorf("transactional produce retries span %v during the session, want >= %v", got, failover)
	}
	// The first retry follows a leader lookup: a leader that moved while
	// the producer was idle is tried again at once, a failover that is
	// still on is paced.
	for i, want := range []time.Duration{txnFirstRetryBackoff, txnProduceBackoff, txnProduceBackoff} {
		if got := tx.Producer.Retry.BackoffFunc(i+1, tx.Producer.Retry.Max); got != want {
			t.Errorf("transactional produce: pause before retry %d = %v, want %v", i+1, got, want)
		}
	}
	// sarama sleeps Retry.Backoff (not BackoffFunc) when a partition finds
	// its leader's connection gone, before it looks the leader up again.
	if got := tx.Producer.Retry.Backoff; got != txnFirstRetryBackoff {
		t.Errorf("transactional produce: pause after a lost leader connection %v, want %v", got, txnFirstRetryBackoff)
	}
	cancel()
	if got, want := span(), time.Duration(txnQuickRetries)*txnProduceBackoff; got > want {
		t.Errorf("transactional produce retries span %v once the session ended, want <= %v", got, want)
	}
}
