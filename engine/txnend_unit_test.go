package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// endTxnAttempts is how many times sarama sends one EndTxn whose
// coordinator answers NOT_COORDINATOR before it gives up with the producer
// still ending the transaction: once and Producer.Transaction.Retry.Max
// (100, engine/txn.go) more, 100 ms apart.
const endTxnAttempts = 101

// coordinatorLostTimeout bounds the waits of the tests below: one EndTxn
// call that sarama gives up on takes about 10 s.
const coordinatorLostTimeout = 45 * time.Second

func isCommit(req kmsg.Request) bool { return req.(*kmsg.EndTxnRequest).Commit }
func isAbort(req kmsg.Request) bool  { return !req.(*kmsg.EndTxnRequest).Commit }

// TestUnitCommitCoordinatorLost: a commit that sarama gave up on because
// its transaction coordinator did not answer (the producer still
// committing) is committed again: no abort, no session restart, exact
// counts.
func TestUnitCommitCoordinatorLost(t *testing.T) {
	t.Parallel()
	topics := engine.Config{ApplicationID: "unit"}.Topics()
	for _, txnID := range []string{topics.TransactionalID(0), topics.RekeyTransactionalID(0)} {
		t.Run(txnID, func(t *testing.T) {
			t.Parallel()
			cfg := unitConfig(nil, engine.ExactlyOnce)
			// Longer than sarama's attempts, so that the broker does not
			// abort the transaction for its timeout meanwhile.
			cfg.TransactionTimeout = 30 * time.Second
			r := newRig(t, nil, cfg, nil).start(t)
			first := []rating{{1, 5}, {2, 7}}
			r.rate(t, 0, first...)
			eventually(t, "first batch stored", r.storeHas(totals(first)))
			r.c.fail(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: txnID, When: isCommit, Err: kerr.NotCoordinator, Count: endTxnAttempts})
			second := []rating{{1, 9}, {3, 4}}
			r.rate(t, 0, second...)
			testkit.Eventually(t, coordinatorLostTimeout, "both batches stored", r.storeHas(totals(first, second)))
			st := r.e.Stats()
			if st.TransactionsAborted != 0 || st.GroupRestarts != 0 {
				t.Errorf("aborted %d, restarts %d: want 0 and 0 (the commit is tried again)", st.TransactionsAborted, st.GroupRestarts)
			}
			if n := countEvents(r.c, evCommit, txnID, true); n != endTxnAttempts {
				t.Errorf("failed commits of %s: got %d, want %d (the injected ones)", txnID, n, endTxnAttempts)
			}
		})
	}
}

// TestUnitCommitNeverAnswered: a commit whose coordinator stays lost past
// twice the transaction timeout is given up and the transaction aborted by
// the engine (rather than left open for the broker's transaction timeout),
// the abort sent again while the coordinator does not answer; the
// partition is then restored and the counts are exact.
func TestUnitCommitNeverAnswered(t *testing.T) {
	t.Parallel()
	cfg := unitConfig(nil, engine.ExactlyOnce)
	cfg.TransactionTimeout = time.Second
	task := cfg.Topics().TransactionalID(0)
	r := newRig(t, nil, cfg, nil).start(t)
	first := []rating{{1, 5}, {2, 7}}
	r.rate(t, 0, first...)
	eventually(t, "first batch stored", r.storeHas(totals(first)))
	commits := r.c.fail(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: task, When: isCommit, Err: kerr.NotCoordinator, Count: -1})
	r.c.fail(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: task, When: isAbort, Err: kerr.NotCoordinator, Count: 3})
	second := []rating{{1, 9}, {3, 4}}
	r.rate(t, 0, second...)
	testkit.Eventually(t, coordinatorLostTimeout, "the engine's abort answered", func() error {
		if n := countEvents(r.c, evAbort, task, false); n == 0 {
			return fmt.Errorf("no abort of %s answered yet", task)
		}
		return nil
	})
	commits.Remove()
	testkit.Eventually(t, coordinatorLostTimeout, "both batches stored", r.storeHas(totals(first, second)))
	if st := r.e.Stats(); st.TransactionsAborted < 1 || st.GroupRestarts < 1 {
		t.Errorf("aborted %d, restarts %d: want >= 1 each", st.TransactionsAborted, st.GroupRestarts)
	}
	if n := countEvents(r.c, evAbort, task, true); n != 3 {
		t.Errorf("failed aborts: got %d, want 3 (sent again until answered)", n)
	}
}

// countEvents counts the log's events of kind on txnID that failed
// (failed) or were answered without an injected error.
func countEvents(c *kcluster, kind, txnID string, failed bool) int {
	n := 0
	for _, e := range c.Events() {
		if e.Kind == kind && e.TxnID == txnID && (e.Err != nil) == failed {
			n++
		}
	}
	return n
}
