package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// ErrTxnAborted means a task's transaction was aborted (or its outcome is
// unknown): none of its records are visible to read_committed readers, its
// offsets were not committed and the store was not written; the partition
// is restored and reprocessed from the last committed offsets.
var ErrTxnAborted = errors.New("transaction aborted")

// MaxRecordBytes is the largest record the engine produces (key, value and
// headers); the producer's limit and the internal topics'
// max.message.bytes are sized from it. A larger input record goes to the
// dead-letter topic, truncated.
const MaxRecordBytes = 1_000_000

// topicMaxMessageBytes is max.message.bytes of the internal topics: one
// record of MaxRecordBytes plus the record batch overhead.
const topicMaxMessageBytes = MaxRecordBytes + 48*1024

// TransactionalID is the transactional id of the producer that flushes
// aggregate partition p, whichever instance runs it: a new owner's
// producer initialisation fences the previous owner's producer and aborts
// its open transaction at once, and the group metadata on the offset
// commit fences it again.
func (t Topics) TransactionalID(p int32) string {
	return t.Changelog + "-txn-" + strconv.Itoa(int(p))
}

// RekeyTransactionalID is the transactional id of the producer that
// forwards input partition p to the repartition topic, whichever instance
// reads it (as TransactionalID): a member that lost the input partition
// gets no record into the repartition topic, so the aggregate sees every
// input record once and in input order.
func (t Topics) RekeyTransactionalID(p int32) string {
	return t.Repartition + "-txn-" + strconv.Itoa(int(p))
}

// txnProduceBackoff is the pause between two tries of a failed
// transactional produce; txnFirstRetryBackoff the one before its first
// retry, short since sarama looks the leader up again first (it may only
// have moved while the producer was idle).
const (
	txnProduceBackoff    = 250 * time.Millisecond
	txnFirstRetryBackoff = 25 * time.Millisecond
)

// newTaskProducer opens the transactional producer of aggregate partition
// p (see newTxnProducer).
func (e *Engine) newTaskProducer(ctx context.Context, p int32) (sarama.SyncProducer, error) {
	pr, _, err := e.openTaskProducer(ctx, p)
	return pr, err
}

// openTaskProducer is newTaskProducer, and also returns the producer's
// retry pacing, whose context a task that keeps the producer moves on.
func (e *Engine) openTaskProducer(ctx context.Context, p int32) (sarama.SyncProducer, *txnRetry, error) {
	return e.openTxnProducer(ctx, e.topics.TransactionalID(p), "-task-"+strconv.Itoa(int(p)))
}

// newRekeyProducer opens the transactional producer of input partition p
// (see newTxnProducer).
func (e *Engine) newRekeyProducer(ctx context.Context, p int32) (sarama.SyncProducer, error) {
	pr, _, err := e.openRekeyProducer(ctx, p)
	return pr, err
}

// openRekeyProducer is newRekeyProducer, and also returns the producer's
// retry pacing (see openTaskProducer).
func (e *Engine) openRekeyProducer(ctx context.Context, p int32) (sarama.SyncProducer, *txnRetry, error) {
	return e.openTxnProducer(ctx, e.topics.RekeyTransactionalID(p), "-rekey-"+strconv.Itoa(int(p)))
}

// newTxnProducer opens a transactional producer with transactional id id,
// which fences every earlier producer with the same id and waits for the
// broker to abort their open transaction. A txnRetry on ctx paces its
// produce retries.
func (e *Engine) newTxnProducer(ctx context.Context, id, clientSuffix string) (sarama.SyncProducer, error) {
	pr, _, err := e.openTxnProducer(ctx, id, clientSuffix)
	return pr, err
}

// openTxnProducer is newTxnProducer, and also returns the producer's
// retry pacing.
func (e *Engine) openTxnProducer(ctx context.Context, id, clientSuffix string) (sarama.SyncProducer, *txnRetry, error) {
	r := newTxnRetry(ctx)
	sc := e.txnProducerConfig(id, clientSuffix, r)
	pr, err := e.kafka.NewSyncProducer(sc)
	if err != nil {
		return nil, nil, fmt.Errorf("transactional producer %s: %w", sc.Producer.Transaction.ID, err)
	}
	r.pr.Store(pr)
	return pr, r, nil
}

// txnQuickRetries is how many times a transactional produce is still
// retried, at txnProduceBackoff, once its txnRetry's context is done.
const txnQuickRetries = 5

// txnRetry paces the produce retries of one transactional producer: once
// after txnFirstRetryBackoff, then every txnProduceBackoff for twice the
// transaction timeout, to ride out a leader failover without aborting.
// The remaining tries are spent without a pause once the transaction is in
// error (it can only abort) or, after txnQuickRetries, once ctx is done
// (the session is ending and must not wait for a failover). Safe for
// concurrent use.
type txnRetry struct {
	ctx atomic.Pointer[context.Context] // the session's; see setContext
	pr  atomic.Value                    // sarama.SyncProducer, once opened
}

func newTxnRetry(ctx context.Context) *txnRetry {
	r := new(txnRetry)
	r.setContext(ctx)
	return r
}

// setContext makes ctx the context whose end makes retries quick: a
// producer kept for the next session (park.go) follows that session.
func (r *txnRetry) setContext(ctx context.Context) { r.ctx.Store(&ctx) }

// backoff is the producer's Retry.BackoffFunc.
func (r *txnRetry) backoff(retries, _ int) time.Duration {
	if pr, ok := r.pr.Load().(sarama.SyncProducer); ok && pr.TxnStatus()&sarama.ProducerTxnFlagInError != 0 {
		return 0
	}
	if (*r.ctx.Load()).Err() != nil && retries > txnQuickRetries {
		return 0
	}
	if retries <= 1 {
		return txnFirstRetryBackoff
	}
	return txnProduceBackoff
}

// txnProducerConfig is the configuration of newTxnProducer's producer;
// retry paces its produce retries.
func (e *Engine) txnProducerConfig(id, clientSuffix string, retry *txnRetry) *sarama.Config {
	sc := e.saramaConfig()
	sc.ClientID = e.cfg.ApplicationID + clientSuffix
	sc.Producer.Transaction.ID = id
	sc.Producer.Transaction.Timeout = e.cfg.TransactionTimeout
	// Offset-fetch and coordinator retries must outlast an open
	// transaction of a dead predecessor (the transaction timeout), and a
	// lost coordinator until Kafka has elected the next (7.5-13 s).
	sc.Producer.Transaction.Retry.Backoff = 100 * time.Millisecond
	sc.Producer.Transaction.Retry.Max = max(100, int(e.cfg.TransactionTimeout/sc.Producer.Transaction.Retry.Backoff))
	sc.Producer.Transaction.Retry.BackoffFunc = nil
	// Produce retries: see txnRetry. With BackoffFunc set, sarama uses
	// Retry.Backoff only before it looks up a leader whose connection is
	// gone, the same case as a first retry.
	sc.Producer.Retry.Backoff = txnFirstRetryBackoff
	sc.Producer.Retry.Max = max(txnQuickRetries, int(2*e.cfg.TransactionTimeout/txnProduceBackoff))
	sc.Producer.Retry.BackoffFunc = retry.backoff
	producerTimeouts(sc)
	return sc
}

// producerTimeouts bounds how long a producer waits for a broker's answer
// to Producer.Timeout (the broker's wait for its in-sync replicas) plus
// 2 s, not sarama's 30 s: a silent broker then holds a request only that
// long before it is retried on the leader Kafka elected meanwhile. Only
// producers: a JoinGroup may rightly wait longer.
func producerTimeouts(sc *sarama.Config) {
	sc.Net.ReadTimeout = sc.Producer.Timeout + 2*time.Second
}

// isFencing reports whether err says another owner took over: the broker
// refused our producer epoch or our group generation/member.
func isFencing(err error) bool {
	for _, k := range []sarama.KError{sarama.ErrProducerFenced, sarama.ErrInvalidProducerEpoch,
		sarama.ErrIllegalGeneration, sarama.ErrUnknownMemberId, sarama.ErrFencedInstancedId,
		sarama.ErrRebalanceInProgress, sarama.ErrInvalidProducerIDMapping} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// sendErr turns sarama's ProducerErrors (which does not unwrap) into an
// error that names each failed record's topic and partition and unwraps
// to each cause, so errors.Is sees the Kafka error codes.
func sendErr(err error) error {
	var pes sarama.ProducerErrors
	if !errors.As(err, &pes) || len(pes) == 0 {
		return err
	}
	var names []string
	errs := make([]error, 0, len(pes))
	for _, pe := range pes {
		if pe.Msg != nil {
			if n := pe.Msg.Topic + "/" + strconv.Itoa(int(pe.Msg.Partition)); !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		errs = append(errs, pe.Err)
	}
	return fmt.Errorf("%d record(s) to %s not delivered: %w", len(pes), strings.Join(names, ", "), errors.Join(dedupErrs(errs)...))
}

// dedupErrs keeps the first error of each distinct kind.
func dedupErrs(errs []error) []error {
	var out []error
	for _, e := range errs {
		if !slices.ContainsFunc(out, func(o error) bool { return errors.Is(o, e) }) {
			out = append(out, e)
		}
	}
	return out
}

// endTxn finishes a failed transaction of pr: it aborts it when the
// producer still can (abortTxn), counts it, and returns err wrapped in
// ErrTxnAborted (and ErrFenced when the broker refused this instance as the
// owner). what names the transaction in the error.
func (e *Engine) endTxn(pr sarama.SyncProducer, what, step string, err error) error {
	e.abortTxn(pr, what, fmt.Errorf("%s: %w", step, err))
	e.c.txnAborted.Add(1)
	if isFencing(err) {
		e.c.fenced.Add(1)
		return fmt.Errorf("%s: %w (%s): %w: %w", what, ErrTxnAborted, step, ErrFenced, err)
	}
	return fmt.Errorf("%s: %w (%s): %w", what, ErrTxnAborted, step, err)
}

// groupMetadata identifies this member to the broker on transactional
// offset commits, so that the commit of a member that lost the partition
// is refused (KIP-447).
func (e *Engine) groupMetadata(s sarama.ConsumerGroupSession) *sarama.ConsumerGroupMetadata {
	var instance *string
	if id := e.cfg.InstanceID; id != "" {
		instance = &id
	}
	return sarama.NewConsumerGroupMetadataFromSession(s, e.cfg.ApplicationID, instance)
}
