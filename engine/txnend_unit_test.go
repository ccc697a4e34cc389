package engine_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/kafkatest"
)

// TestUnitCommitCoordinatorLost: a commit that sarama gave up on because
// its transaction coordinator did not answer (the producer still
// committing) is committed again: no abort, no session restart, exact
// counts.
func TestUnitCommitCoordinatorLost(t *testing.T) {
	topics := engine.Config{ApplicationID: "unit"}.Topics()
	for _, txnID := range []string{topics.TransactionalID(0), topics.RekeyTransactionalID(0)} {
		t.Run(txnID, func(t *testing.T) {
			c := kafkatest.New()
			r := newRig(t, c, unitConfig(c, engine.ExactlyOnce), nil).start(t)
			first := []rating{{1, 5}, {2, 7}}
			r.rate(t, 0, first...)
			eventually(t, "first batch stored", r.storeHas(totals(first)))
			c.FailNext(kafkatest.Op{Kind: kafkatest.OpCommit, TxnID: txnID}, kafkatest.ErrCoordinatorLost)
			c.FailNext(kafkatest.Op{Kind: kafkatest.OpCommit, TxnID: txnID}, kafkatest.ErrCoordinatorLost)
			second := []rating{{1, 9}, {3, 4}}
			r.rate(t, 0, second...)
			eventually(t, "both batches stored", r.storeHas(totals(first, second)))
			st := r.e.Stats()
			if st.TransactionsAborted != 0 || st.GroupRestarts != 0 {
				t.Errorf("aborted %d, restarts %d: want 0 and 0 (the commit is tried again)", st.TransactionsAborted, st.GroupRestarts)
			}
			if n := failedEvents(c, kafkatest.OpCommit, txnID); n != 2 {
				t.Errorf("failed commits of %s: got %d, want 2 (the injected ones)", txnID, n)
			}
		})
	}
}

// TestUnitCommitNeverAnswered: a commit whose coordinator stays lost past
// twice the transaction timeout is given up and the transaction aborted by the
// engine, the abort tried again until the coordinator answers, rather
// than left open for the broker's transaction timeout; the partition is
// then restored and the counts are exact.
func TestUnitCommitNeverAnswered(t *testing.T) {
	c := kafkatest.New()
	cfg := unitConfig(c, engine.ExactlyOnce)
	cfg.TransactionTimeout = time.Second
	task := cfg.Topics().TransactionalID(0)
	r := newRig(t, c, cfg, nil).start(t)
	first := []rating{{1, 5}, {2, 7}}
	r.rate(t, 0, first...)
	eventually(t, "first batch stored", r.storeHas(totals(first)))

	// The coordinator is lost from the first commit until the fourth
	// abort, which it answers.
	var mu sync.Mutex
	var lostAt time.Time
	aborts := 0
	c.SetFault(func(op kafkatest.Op) error {
		mu.Lock()
		defer mu.Unlock()
		if op.TxnID != task || aborts > 3 {
			return nil
		}
		switch op.Kind {
		case kafkatest.OpCommit:
			if lostAt.IsZero() {
				lostAt = time.Now()
			}
			return kafkatest.ErrCoordinatorLost
		case kafkatest.OpAbort:
			if aborts++; aborts <= 3 {
				return kafkatest.ErrCoordinatorLost
			}
		}
		return nil
	})
	second := []rating{{1, 9}, {3, 4}}
	r.rate(t, 0, second...)
	eventually(t, "the abort answered", func() error {
		if n := succeededEvents(c, kafkatest.OpAbort, task); n == 0 {
			return fmt.Errorf("no abort of %s succeeded yet", task)
		}
		return nil
	})
	mu.Lock()
	took := time.Since(lostAt)
	mu.Unlock()
	eventually(t, "both batches stored", r.storeHas(totals(first, second)))
	if st := r.e.Stats(); st.TransactionsAborted < 1 || st.GroupRestarts < 1 {
		t.Errorf("aborted %d, restarts %d: want >= 1 each", st.TransactionsAborted, st.GroupRestarts)
	}
	if n := failedEvents(c, kafkatest.OpAbort, task); n != 3 {
		t.Errorf("failed aborts: got %d, want 3 (tried again until answered)", n)
	}
	if limit := 2*cfg.TransactionTimeout + 2*time.Second; took > limit {
		t.Errorf("aborted %v after the first lost commit, want <= %v", took, limit)
	}
}

// failedEvents counts the events of kind on txnID that failed.
func failedEvents(c *kafkatest.Cluster, kind, txnID string) int {
	n := 0
	for _, e := range c.Events() {
		if e.Kind == kind && e.TxnID == txnID && e.Err != nil {
			n++
		}
	}
	return n
}

// succeededEvents counts the events of kind on txnID that succeeded.
func succeededEvents(c *kafkatest.Cluster, kind, txnID string) int {
	n := 0
	for _, e := range c.Events() {
		if e.Kind == kind && e.TxnID == txnID && e.Err == nil {
			n++
		}
	}
	return n
}
