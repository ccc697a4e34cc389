package engine

import (
	"time"

	"github.com/IBM/sarama"
)

// txnEndBackoff is the pause between two calls that end a transaction
// (commit or abort) whose coordinator did not answer; sarama paces its own
// retries within each call (Producer.Transaction.Retry).
const txnEndBackoff = 100 * time.Millisecond

// commitTxn commits pr's open transaction, begun at begun.
//
// A commit caught by the loss of its transaction coordinator fails in
// sarama once its retries are spent, with the producer still committing:
// Kafka elects the new coordinator only after noticing the loss (9 s) and
// loading the transaction. commitTxn then commits again, until twice the
// transaction timeout since begun or an answer settles it; on an error the
// caller aborts (endTxn). Committing late is safe: the coordinator decides
// a transaction once, and one aborted for its timeout refuses the commit.
// A late commit spares the partition a restore and the group a rebalance.
func (e *Engine) commitTxn(pr sarama.SyncProducer, begun time.Time) error {
	deadline := begun.Add(2 * e.cfg.TransactionTimeout)
	for attempt := 1; ; attempt++ {
		err := pr.CommitTxn()
		if err == nil || !ending(pr) || !time.Now().Before(deadline) {
			return err
		}
		e.log.Info("transaction commit unanswered; committing again", "attempt", attempt, "err", err,
			"left", time.Until(deadline).Round(time.Millisecond))
		time.Sleep(txnEndBackoff)
	}
}

// ending reports whether pr's transaction is being ended (committed or
// aborted) and no error has settled its fate: its coordinator did not
// answer, so ending it may be tried again.
func ending(pr sarama.SyncProducer) bool {
	st := pr.TxnStatus()
	return st&sarama.ProducerTxnFlagEndTransaction != 0 && st&sarama.ProducerTxnFlagInError == 0
}

// abortTxn aborts pr's failed transaction when the producer still can,
// calling AbortTxn again while the coordinator does not answer, for up to
// twice the transaction timeout: an open transaction holds back every
// read_committed reader of its partitions (restores among them) until the
// broker aborts it. cause is why it is aborted (logged if the abort fails).
func (e *Engine) abortTxn(pr sarama.SyncProducer, what string, cause error) {
	st := pr.TxnStatus()
	if st&sarama.ProducerTxnFlagFatalError != 0 ||
		st&(sarama.ProducerTxnFlagInTransaction|sarama.ProducerTxnFlagAbortableError|sarama.ProducerTxnFlagEndTransaction) == 0 {
		return
	}
	start := time.Now()
	deadline := start.Add(2 * e.cfg.TransactionTimeout)
	for attempt := 1; ; attempt++ {
		err := pr.AbortTxn()
		if err == nil {
			if attempt > 1 {
				e.log.Warn("transaction aborted after its coordinator came back", "txn", what, "cause", cause,
					"attempts", attempt, "took", time.Since(start).Round(time.Millisecond))
			}
			return
		}
		if !ending(pr) || !time.Now().Before(deadline) {
			e.log.Warn("could not abort transaction; the broker aborts it after the transaction timeout, or completes a commit it had prepared",
				"txn", what, "cause", cause, "err", err, "attempts", attempt, "took", time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(txnEndBackoff)
	}
}
