package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
)

// finalFlushTimeout bounds the flush a task does when its session ends.
const finalFlushTimeout = 30 * time.Second

// task aggregates one repartition partition: it restores the partition,
// then applies records to a write-behind cache that is flushed every commit
// interval (see flush). A task is used by one goroutine only.
type task struct {
	e     *Engine
	sess  sarama.ConsumerGroupSession
	claim sarama.ConsumerGroupClaim
	p     int32
	epoch int64

	// producer is the partition's transactional producer (nil under
	// at-least-once, which uses the engine's shared producer).
	producer sarama.SyncProducer
	retry    *txnRetry                 // producer's retry pacing
	dead     []*sarama.ProducerMessage // dead letters for the next flush's transaction
	// clean is set once the final flush committed everything (see park).
	clean bool

	cache docCache
	dirty []*entry // changed since the last flush (each once: entry.dirty)
	hits  []*entry // process's scratch: the cached entry of each record
	// next is the repartition offset to commit (last seen + 1); committed
	// is the last value committed.
	next, committed int64
	// checkpoint is the partition's changelog checkpoint in the store;
	// verified is when a store write last confirmed the claim.
	checkpoint int64
	verified   time.Time

	// inflight is the persist in flight (see flush); broken is the error
	// of a failed persist, after which the task writes nothing more.
	inflight *persistJob
	broken   error
	flushed  time.Time // when the last flush handed a batch to a persist
}

func newTask(e *Engine, s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) *task {
	return &task{e: e, sess: s, claim: c, p: c.Partition(),
		cache: newDocCache(e.job.KeySize() == 8), next: -1, committed: -1}
}

// run restores the partition and processes it until the session ends.
func (t *task) run() error {
	e := t.e
	ctx := t.sess.Context()
	defer t.park()
	if !t.resume(ctx) {
		if err := t.restore(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("restore partition %d: %w", t.p, err)
		}
	}
	e.route.parts.set(t.p, Running)
	e.c.running.Add(1)
	ticker := time.NewTicker(e.cfg.CommitInterval)
	defer ticker.Stop()
	idle := time.NewTimer(time.Hour) // armed when the input runs dry
	idle.Stop()
	defer idle.Stop()
	resumed := e.cfg.IdleFlush > 0 // until the catch-up flush (see idleFlushGap)
	first := resumed               // the first batch is flushed at once
	for {
		var err error
		select {
		case <-ctx.Done():
			return t.finalFlush()
		case <-t.persistDone():
			err = t.awaitPersist()
		case <-ticker.C:
			err = t.flush(ctx)
		case <-idle.C:
			if wait := idleFlushGap - time.Since(t.flushed); wait > 0 {
				idle.Reset(wait)
				continue
			}
			err = t.flush(ctx)
		case m, ok := <-t.claim.Messages():
			if !ok {
				return t.finalFlush()
			}
			if err := t.process(ctx, drain(m, t.claim.Messages())); err != nil {
				return t.stop(err)
			}
			catchUp := resumed && t.caughtUp()
			if len(t.dirty) >= e.cacheBound() || len(t.dead) >= maxDrain || catchUp || first {
				if err = t.flush(ctx); err == nil && catchUp {
					resumed = false
					ticker.Reset(e.cfg.CommitInterval)
				}
			}
			first = false
			if err == nil && e.cfg.IdleFlush > 0 && len(t.claim.Messages()) == 0 && t.caughtUp() {
				idle.Reset(e.cfg.IdleFlush)
			} else {
				idle.Stop()
			}
		}
		if err != nil {
			return t.stop(err)
		}
	}
}

// caughtUp reports whether the task has seen every record of its
// partition that the broker holds, but for the transaction markers that
// may follow the last one (markerSlack). sarama learns the end only from
// fetches that return records, so it may be stale; the idle time, longer
// than the rekey commit period, keeps a partition between two commits of
// a busy rekey stage from counting as idle.
func (t *task) caughtUp() bool {
	hwm := t.claim.HighWaterMarkOffset()
	return t.next >= 0 && hwm-t.next <= markerSlack
}

// markerSlack is how far behind the partition's end a task that has seen
// every readable record may be: the markers of as many transactions.
const markerSlack = 16

// The idle flush: a task whose input runs dry flushes once no record has
// arrived for Config.IdleFlush and it is caughtUp, at most once per
// idleFlushGap, so the end of a burst shows without waiting for the commit
// interval; under load flushes stay one per commit interval.
//
// The catch-up flush: a task that starts flushes its first batch at once
// and again once it has caught up with the records that queued while
// nobody ran its partition. Config.IdleFlush 0 turns both off.
const idleFlushGap = 100 * time.Millisecond

// stop turns a flush or process error into the task's result. An error
// caused by the session ending is not one: the task then flushes what it
// holds with its own deadline, as at any end of a session.
func (t *task) stop(err error) error {
	if t.sess.Context().Err() != nil {
		return t.finalFlush()
	}
	return err
}

// finalFlush writes what the task holds when its session ends, with its
// own deadline. Under exactly-once a member that has lost the partition
// cannot commit: the next owner reprocesses the records.
func (t *task) finalFlush() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.sess.Context()), finalFlushTimeout)
	defer cancel()
	err := t.flush(ctx) // waits for the persist in flight first
	if err == nil {
		err = t.awaitPersist()
	}
	t.clean = err == nil
	if err != nil {
		lvl := slog.LevelWarn
		if errors.Is(err, ErrFenced) {
			lvl = slog.LevelInfo
		}
		t.e.log.Log(ctx, lvl, "final flush not committed; the next owner reprocesses from the last commit", "partition", t.p, "err", err)
	}
	return nil
}

// closeProducer closes the task's transactional producer, if any. An open
// transaction is aborted by the broker when the next owner initialises
// the partition's producer, or after the transaction timeout.
func (t *task) closeProducer() {
	if t.inflight != nil {
		<-t.inflight.done // a persist still uses the producer
		t.inflight = nil
	}
	if t.producer != nil {
		if err := t.producer.Close(); err != nil {
			t.e.log.Debug("closing transactional producer", "partition", t.p, "err", err)
		}
		t.producer = nil
	}
}

// deadLetters sends dead letters produced while processing: under
// exactly-once they join the next flush's transaction (so a batch that is
// reprocessed after an abort does not dead-letter twice); under
// at-least-once they are sent at once.
func (t *task) deadLetters(dead []*sarama.ProducerMessage) error {
	if len(dead) == 0 {
		return nil
	}
	if t.producer != nil {
		t.dead = append(t.dead, dead...)
		return nil
	}
	if err := t.e.producer.SendMessages(dead); err != nil {
		return fmt.Errorf("dead letters: %w", sendErr(err))
	}
	t.e.c.dead.Add(int64(len(dead)))
	return nil
}

// process applies a batch of repartition records to the cache.
func (t *task) process(ctx context.Context, batch []*sarama.ConsumerMessage) error {
	e := t.e
	var missing [][]byte
	bad := make([]bool, len(batch))
	// One cache lookup per record, kept for apply; only misses are
	// looked up again.
	hits := t.hits[:0]
	for i, m := range batch {
		if err := e.job.CheckKey(m.Key); err != nil {
			bad[i] = true
			hits = append(hits, nil)
			continue
		}
		d := t.cache.get(m.Key)
		hits = append(hits, d)
		if d == nil {
			missing = append(missing, m.Key)
		}
	}
	t.hits = hits
	defer clear(hits) // keep no entry alive through the scratch
	if len(missing) > 0 {
		var loaded map[string]Doc
		err := e.retryUnavailable(ctx, "load", func() (err error) {
			loaded, err = e.table.Load(ctx, missing)
			return err
		})
		if err != nil {
			return fmt.Errorf("load documents: %w", err)
		}
		for _, d := range loaded {
			a, err := e.job.DecodeValue(ctx, d.Value)
			if err != nil {
				return fmt.Errorf("load document %s: %w", e.job.FormatKey(d.Key), err)
			}
			t.cache.put(&entry{key: d.Key, version: d.Version, sources: d.Sources, agg: a})
		}
	}
	var dead []*sarama.ProducerMessage
	var stopErr error
	next := t.next
records:
	for i, m := range batch {
		srcP, srcO, hasSrc, err := sourceOf(m.Headers)
		switch {
		case bad[i]:
			err = fmt.Errorf("bad repartition key: %w", ErrInvalid)
		case err == nil:
			if err = t.apply(ctx, m, hits[i], srcP, srcO, hasSrc); err != nil && ctx.Err() != nil {
				// Not this record's fault: stop here, it is processed again later.
				stopErr = ctx.Err()
				break records
			}
		}
		next = m.Offset + 1
		if err != nil {
			dead = append(dead, e.deadLetter(m, err))
		}
	}
	if err := t.deadLetters(dead); err != nil {
		return err
	}
	t.next = next
	return stopErr
}

// apply adds one record to d (its cached document, or nil to look it up)
// unless the document already reflects it: its repartition offset is not
// above the document's version, or its input offset is not above the one
// recorded for its input partition. A record the job cannot decode or add
// returns the error (dead-lettered by the caller) and changes nothing.
func (t *task) apply(ctx context.Context, m *sarama.ConsumerMessage, d *entry, srcP int32, srcO int64, hasSrc bool) error {
	e := t.e
	if d == nil { // not cached when the batch began: loaded, or new
		d = t.cache.get(m.Key)
	}
	if d != nil {
		last, seen := d.sources[srcP]
		if m.Offset <= d.version || hasSrc && seen && srcO <= last {
			e.c.duplicates.Add(1)
			return nil
		}
	}
	fresh := d == nil
	if fresh {
		d = newEntry(m.Key, -1, e.job.NewAgg())
	}
	if err := e.addRecord(ctx, d.agg, m.Key, m.Value); err != nil {
		return err
	}
	if fresh {
		t.cache.put(d)
	}
	d.version = m.Offset
	if hasSrc {
		if d.sources == nil {
			d.sources = map[int32]int64{}
		}
		d.sources[srcP] = srcO
	}
	if !d.dirty {
		d.dirty = true
		t.dirty = append(t.dirty, d)
	}
	e.c.processed.Add(1)
	return nil
}
