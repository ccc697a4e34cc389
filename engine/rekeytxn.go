package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
)

// rekeyer is the exactly-once rekey stage of one input partition, used by
// its claim's goroutine only. It forwards records inside a transaction of
// the input partition's producer (Topics.RekeyTransactionalID), committed
// every commit interval with the input offset, which carries the group's
// generation and member (KIP-447).
//
// The aggregate skips a record whose input offset is not above the last
// one it counted from that input partition, exact only if each input
// partition's records arrive once and in order. A zombie's interleaved
// records would make the new owner's skipped uncounted; in a transaction
// they never commit: the new owner's producer aborts the zombie's open
// transaction, and its offset commit is refused for its old generation.
type rekeyer struct {
	e    *Engine
	sess sarama.ConsumerGroupSession
	p    int32
	pr   sarama.SyncProducer

	inTxn      bool
	begun      time.Time // when the open transaction began
	next       int64     // input offset to commit: last forwarded + 1
	forwarded  int64     // records forwarded in the open transaction
	dead       int64     // dead letters in the open transaction
	lastCommit time.Time
	clean      bool // the final commit went through: the producer may be parked
}

// rekeyTxn runs the exactly-once rekey stage of a claimed input partition
// until the session ends. An error (failed or fenced transaction) aborts
// the open transaction and restarts the session: the partition is then
// read again from the last committed offset.
func (e *Engine) rekeyTxn(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	ctx := s.Context()
	var pr sarama.SyncProducer
	var retry *txnRetry
	if pt := e.parkedRekey.take(c.Partition(), s.GenerationID()); pt != nil {
		pr, retry = pt.producer, pt.retry // see park.go
		retry.setContext(ctx)
		e.log.Debug("rekey producer kept across the rebalance", "input_partition", c.Partition())
	} else {
		var err error
		if pr, retry, err = e.openRekeyProducer(ctx, c.Partition()); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	r := &rekeyer{e: e, sess: s, p: c.Partition(), pr: pr, next: -1, lastCommit: time.Now()}
	defer func() {
		if r.clean {
			e.parkedRekey.put(r.p, &parkedTask{producer: pr, retry: retry, gen: s.GenerationID()})
			return
		}
		if err := pr.Close(); err != nil {
			e.log.Debug("closing rekey producer", "partition", c.Partition(), "err", err)
		}
	}()
	ticker := time.NewTicker(r.interval())
	defer ticker.Stop()
	f := newForwarder()
	for {
		select {
		case <-ctx.Done():
			return r.final()
		case <-ticker.C:
			if err := r.commit(); err != nil {
				return r.stop(err)
			}
		case m, ok := <-c.Messages():
			if !ok {
				return r.final()
			}
			batch := drain(m, c.Messages())
			out, dead, err := e.forward(ctx, f, batch)
			if err != nil {
				return r.final()
			}
			if err := r.send(out); err != nil {
				return r.stop(err)
			}
			f.reset() // SendMessages returned every record
			r.forwarded += int64(len(batch) - dead)
			r.dead += int64(dead)
			r.next = batch[len(batch)-1].Offset + 1
			if time.Since(r.lastCommit) >= r.interval() {
				if err := r.commit(); err != nil {
					return r.stop(err)
				}
			}
		}
	}
}

// send produces out inside the open transaction, beginning one if needed.
func (r *rekeyer) send(out []*sarama.ProducerMessage) error {
	defer r.e.route.writes.begin(r.name())()
	if !r.inTxn {
		r.begun = time.Now()
		if err := r.pr.BeginTxn(); err != nil {
			return r.e.endTxn(r.pr, r.name(), "begin", err)
		}
		r.inTxn = true
	}
	if err := r.pr.SendMessages(out); err != nil {
		r.inTxn = false
		return r.e.endTxn(r.pr, r.name(), "produce", sendErr(err))
	}
	return nil
}

// commit commits the open transaction with the input offset; without one
// it does nothing.
func (r *rekeyer) commit() error {
	defer r.e.route.writes.begin(r.name())()
	r.lastCommit = time.Now()
	if !r.inTxn {
		return nil
	}
	r.inTxn = false
	e := r.e
	offsets := map[string][]*sarama.PartitionOffsetMetadata{
		e.topics.Input: {{Partition: r.p, Offset: r.next}},
	}
	if err := r.pr.AddOffsetsToTxnWithGroupMetadata(offsets, e.groupMetadata(r.sess)); err != nil {
		return e.endTxn(r.pr, r.name(), "add offsets", err)
	}
	if err := e.commitTxn(r.pr, r.begun); err != nil {
		return e.endTxn(r.pr, r.name(), "commit", err)
	}
	e.c.txnCommitted.Add(1)
	e.log.Debug("rekey transaction committed", "input_partition", r.p, "offset", r.next,
		"generation", r.sess.GenerationID(), "member", r.sess.MemberID(), "records", r.forwarded)
	e.c.rekeyed.Add(r.forwarded)
	e.c.dead.Add(r.dead)
	r.forwarded, r.dead = 0, 0
	return nil
}

// stop turns a send or commit error into the stage's result: none when
// the session has ended (the transaction is already aborted; the next
// owner reads from the last commit).
func (r *rekeyer) stop(err error) error {
	if r.sess.Context().Err() != nil {
		r.logUncommitted(err)
		return nil
	}
	return err
}

// final commits what the stage forwarded when its session ends (bounded by
// sarama's retries): while the group rebalances the generation is still
// valid, so this usually spares the next owner the work. A member that
// lost the partition cannot commit; its transaction is aborted.
func (r *rekeyer) final() error {
	err := r.commit()
	if err != nil {
		r.logUncommitted(err)
	}
	r.clean = err == nil
	return nil
}

func (r *rekeyer) logUncommitted(err error) {
	lvl := slog.LevelWarn
	if errors.Is(err, ErrFenced) {
		lvl = slog.LevelInfo
	}
	r.e.log.Log(context.Background(), lvl, "rekey transaction not committed; the next owner forwards again from the last commit",
		"input_partition", r.p, "err", err)
}

// maxRekeyCommitInterval caps how long forwarded records wait for their
// rekey transaction to commit: the aggregate reads them read_committed, so
// this adds to the end-to-end latency, which a long --commit-interval
// (meant for the aggregate's cache) must not hold back.
const maxRekeyCommitInterval = 250 * time.Millisecond

// interval is how often the rekey transaction commits.
func (r *rekeyer) interval() time.Duration {
	return min(r.e.cfg.CommitInterval, maxRekeyCommitInterval)
}

func (r *rekeyer) name() string { return "input partition " + itoa(int64(r.p)) }
