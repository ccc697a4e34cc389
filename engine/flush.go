package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/IBM/sarama"
)

// flush hands the task's changed documents to a background persist and
// returns, so the task processes on while the batch is committed and
// written. At most one persist is in flight: flush first waits for the
// previous one, failing with its error. Called by the task's goroutine.
func (t *task) flush(ctx context.Context) error {
	if err := t.awaitPersist(); err != nil {
		return err
	}
	job, err := t.prepare(ctx)
	if err != nil || job == nil {
		return err
	}
	job.done = make(chan struct{})
	t.inflight, t.flushed = job, time.Now()
	go func() {
		defer close(job.done)
		job.err = t.persist(ctx, job)
	}()
	return nil
}

// persistJob is one flush's batch on its way to Kafka and the store, and
// what came of it. Fields above done are set by prepare; the results are
// written by persist and read by the task after done is closed.
type persistJob struct {
	msgs []*sarama.ProducerMessage
	docs []Doc
	dead int
	// next is the repartition offset to commit (commit: not yet committed).
	next   int64
	commit bool
	// verify is an idle partition's empty claim-check write at checkpoint.
	verify     bool
	checkpoint int64
	base       int64 // the store's checkpoint when prepared (see persist)

	done chan struct{}
	err  error
	// wrote: the store write happened; checkpoint is then the store's new
	// checkpoint, at the time verified.
	wrote    bool
	verified time.Time
}

// prepare takes what the task changed since the last flush (nil when there
// is nothing to persist): the dirty documents encoded for the store, their
// changelog and output records, the pending dead letters and the offset to
// commit. The cache keeps the documents.
func (t *task) prepare(ctx context.Context) (*persistJob, error) {
	e := t.e
	if len(t.dirty) == 0 && len(t.dead) == 0 && t.next <= t.committed {
		if time.Since(t.verified) >= verifyInterval {
			// An idle partition still confirms its claim, so that a store
			// that lost its state (Redis restarted without persistence)
			// is noticed and the partition restored.
			return &persistJob{verify: true, checkpoint: t.checkpoint, next: t.next}, nil
		}
		return nil, nil
	}
	job := &persistJob{docs: make([]Doc, 0, len(t.dirty)), msgs: make([]*sarama.ProducerMessage, 0, 2*len(t.dirty)+len(t.dead)),
		dead: len(t.dead), next: t.next, commit: t.next > t.committed, base: t.checkpoint}
	a := newRecordArena(2*len(t.dirty), 1)
	values := make([]byte, 0, 32*len(t.dirty))
	index := make([]IndexValue, 0, len(t.dirty)*len(e.job.Spec().Indexes))
	for _, c := range t.dirty {
		c.dirty = false
		var err error
		start, istart := len(values), len(index)
		if values, err = c.agg.AppendValue(ctx, values); err != nil {
			return nil, err
		}
		index = c.agg.AppendIndex(index)
		d := Doc{Key: c.key, Partition: t.p, Version: c.version, Sources: maps.Clone(c.sources),
			Value: values[start:len(values):len(values)], Index: index[istart:len(index):len(index)]}
		job.docs = append(job.docs, d)
		cl, err := e.changelogRecord(ctx, d, c.agg, a)
		if err != nil {
			return nil, err
		}
		job.msgs = append(job.msgs, cl)
		if e.job.HasOutput() {
			job.msgs = append(job.msgs, e.outputRecord(d.Key, c.agg, a))
		}
	}
	job.msgs = append(job.msgs, t.dead...)
	clear(t.dirty)
	t.dirty, t.dead = t.dirty[:0], nil
	return job, nil
}

// persist makes job durable. It runs on its own goroutine and touches
// only job, the partition's producer and the engine, never the cache.
//
// Exactly-once: (1) in one Kafka transaction, the changelog, output and
// dead-letter records and the repartition offset (with the group's
// generation and member, so the broker refuses a member that lost the
// partition); (2) only after the commit, the documents and the changelog
// checkpoint (one past the transaction's last changelog record) in one
// atomic store write. A failed or fenced transaction is aborted and the
// store left untouched; any error breaks the task (awaitPersist) and
// restarts the session, which restores and reprocesses the partition.
//
// At-least-once: records, then the store, then the offset commit. A crash
// between two steps replays at most this batch, which the version checks
// make a no-op; a zombie is not fenced at the broker.
func (t *task) persist(ctx context.Context, job *persistJob) error {
	e := t.e
	// The store write follows a committed transaction: it outlives the
	// session by up to finalFlushTimeout, or a clean stop would leave the
	// store behind its changelog and cost a restore.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(t.sess.Context(), func() { time.AfterFunc(finalFlushTimeout, cancel) })
	defer stop()
	if job.verify {
		return t.write(ctx, job, DocBatch{Partition: t.p, Epoch: t.epoch, Checkpoint: job.checkpoint})
	}
	if len(job.docs) > 0 && !e.localStore {
		// A shared store that lost its data (Redis restarted without it)
		// answers loads with nothing until a write is fenced, and
		// aggregates built on those reads must never reach the changelog.
		// Confirm the claim before committing: a loss takes the claim with
		// it, so if it holds now, every read of this batch was right.
		if err := t.write(ctx, job, DocBatch{Partition: t.p, Epoch: t.epoch, Checkpoint: job.base}); err != nil {
			return err
		}
	}
	end := e.route.writes.begin("partition " + itoa(int64(t.p)))
	var err error
	if t.producer != nil {
		err = t.commitTxn(job.msgs, job.next, job.commit)
	} else if len(job.msgs) > 0 {
		if err = e.producer.SendMessages(job.msgs); err != nil {
			err = fmt.Errorf("send changelog and averages: %w", sendErr(err))
		}
	}
	end()
	if err != nil {
		return err
	}
	e.c.dead.Add(int64(job.dead))
	if len(job.docs) > 0 {
		checkpoint := int64(-1)
		for _, m := range job.msgs {
			if m.Topic == e.topics.Changelog && m.Offset+1 > checkpoint {
				checkpoint = m.Offset + 1
			}
		}
		if err := t.write(ctx, job, DocBatch{Partition: t.p, Epoch: t.epoch, Docs: job.docs, Checkpoint: checkpoint}); err != nil {
			return err
		}
		e.c.docs.Add(int64(len(job.docs)))
	}
	if t.producer == nil && job.commit {
		t.sess.MarkOffset(e.topics.Repartition, t.p, job.next, "")
		t.sess.Commit()
	}
	return nil
}

// persistDone is closed when the persist in flight ends; nil (never ready
// in a select) when there is none.
func (t *task) persistDone() <-chan struct{} {
	if t.inflight == nil {
		return nil
	}
	return t.inflight.done
}

// awaitPersist waits for the persist in flight, if any, and takes in its
// result: the committed offset, the store checkpoint, and a cache trimmed
// back to its bound. A failed persist breaks the task: its unpersisted
// state is dropped and every later flush of the session returns the error
// without writing (a later batch would move the store's checkpoint past
// documents that were never written).
func (t *task) awaitPersist() error {
	if t.broken != nil {
		return t.broken
	}
	job := t.inflight
	if job == nil {
		return nil
	}
	<-job.done
	t.inflight = nil
	if job.err != nil {
		t.broken = job.err
		t.drop()
		return job.err
	}
	if job.wrote {
		t.checkpoint, t.verified = job.checkpoint, job.verified
		t.e.copies.set(t.p, t.checkpoint)
	}
	if job.commit {
		t.committed = max(t.committed, job.next)
	}
	t.cache.trimClean(t.e.cacheBound())
	return nil
}

// commitTxn produces msgs and, when commit is set, commits the repartition
// offset next in one transaction. On any failure it aborts (when the
// producer still can) and returns an error wrapping ErrTxnAborted, and
// ErrFenced when the broker refused this instance as the partition's owner.
func (t *task) commitTxn(msgs []*sarama.ProducerMessage, next int64, commit bool) error {
	e, pr := t.e, t.producer
	begun := time.Now()
	step, err := "begin", pr.BeginTxn()
	if err == nil && len(msgs) > 0 {
		step, err = "produce", sendErr(pr.SendMessages(msgs))
	}
	if err == nil && commit {
		offsets := map[string][]*sarama.PartitionOffsetMetadata{
			e.topics.Repartition: {{Partition: t.p, Offset: next}},
		}
		step, err = "add offsets", pr.AddOffsetsToTxnWithGroupMetadata(offsets, e.groupMetadata(t.sess))
	}
	if err == nil {
		step, err = "commit", e.commitTxn(pr, begun)
	}
	if err == nil {
		e.c.txnCommitted.Add(1)
		return nil
	}
	return e.endTxn(pr, "partition "+itoa(int64(t.p)), step, err)
}

// drop forgets everything the task holds that is not persisted, after a
// failed flush. The partition is no longer RUNNING, so it is not kept
// answerable (warm) after the session: a new owner may be ahead of it.
func (t *task) drop() {
	t.cache.reset()
	t.dirty, t.dead = nil, nil
	t.e.route.parts.set(t.p, Restoring)
}

// verifyInterval is how often an idle partition confirms its claim.
const verifyInterval = 5 * time.Second

// storeWaitAfterSession is how long a store write still waits for an
// unavailable store once its group session has ended (see task.write).
const storeWaitAfterSession = 2 * time.Second

// write applies b to the store for job, retrying while the store is
// unavailable, and records the new checkpoint in job. A fenced write
// (another owner claimed the partition, or the store lost the claim)
// wraps ErrFenced, which breaks the task and restarts the session. Once
// the session has ended, an unavailable store is waited for only
// storeWaitAfterSession, or the member would hold up the rebalance; the
// batch is in the changelog, so the next restore or standby replays it.
func (t *task) write(ctx context.Context, job *persistJob, b DocBatch) error {
	e := t.e
	waitCtx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(t.sess.Context(), func() { time.AfterFunc(storeWaitAfterSession, stop) })()
	err := e.retryUnavailable(waitCtx, "apply", func() error { return e.table.Apply(ctx, b) })
	if err != nil && waitCtx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("the session ended while the store was unavailable: %w", ErrUnavailable)
	}
	if errors.Is(err, ErrFenced) {
		e.c.fenced.Add(1)
		return fmt.Errorf("partition %d: %w", t.p, err)
	}
	if err != nil {
		return fmt.Errorf("store batch: %w", err)
	}
	e.c.batches.Add(1)
	job.wrote, job.checkpoint, job.verified = true, b.Checkpoint, time.Now()
	return nil
}

// changelogRecord is the compacted changelog record of d, whose aggregate
// is agg: key the document's key, value the job's changelog encoding,
// processing metadata in headers.
func (e *Engine) changelogRecord(ctx context.Context, d Doc, agg Agg, a *recordArena) (*sarama.ProducerMessage, error) {
	v, err := e.job.EncodeChangelog(ctx, e.topics.Changelog, agg)
	if err != nil {
		return nil, fmt.Errorf("encode changelog value: %w", err)
	}
	pm := a.msg()
	pm.Topic, pm.Partition = e.topics.Changelog, d.Partition
	pm.Key, pm.Value = a.enc(d.Key), a.enc(v)
	pm.Headers = a.headers(2)
	pm.Headers[0] = sarama.RecordHeader{Key: keyVersion, Value: a.int(d.Version)}
	pm.Headers[1] = sarama.RecordHeader{Key: keySources, Value: a.sources(d.Sources)}
	return pm, nil
}

// outputRecord is the output record of key's aggregate: the record key and
// the job's output value, partitioned as Kafka's default partitioner would.
func (e *Engine) outputRecord(key []byte, agg Agg, a *recordArena) *sarama.ProducerMessage {
	a.reserve(16)
	start := len(a.buf)
	a.buf = e.job.AppendOutput(a.buf, agg)
	pm := a.msg()
	pm.Topic, pm.Partition = e.topics.Output, PartitionFor(key, e.nOut)
	pm.Key, pm.Value = a.enc(key), a.enc(a.cut(start))
	return pm
}

// EncodeDouble encodes v as Java's DoubleSerializer does.
func EncodeDouble(v float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }

// DecodeDouble decodes a value written by Java's DoubleSerializer; it
// returns ErrInvalid unless b is 8 bytes.
func DecodeDouble(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("double must be 8 bytes, got %d: %w", len(b), ErrInvalid)
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
}
