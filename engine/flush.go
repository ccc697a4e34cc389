package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/avro"
)

// flush persists the task's changed documents.
//
// Exactly-once: (1) in one Kafka transaction, the changelog records, the
// averages, the pending dead letters and the repartition offset (committed
// with the group's generation and member, so the broker refuses a member
// that lost the partition); (2) only after the commit, the documents and the
// changelog checkpoint (one past the last changelog record of this
// transaction, from the acks) in one atomic store write. A failed or fenced
// transaction is aborted, the store is left untouched, the cache dropped,
// and the error restarts the session: the partition is restored and
// reprocessed from the committed offsets.
//
// At-least-once: the same steps without a transaction: records first, then
// the store, then the offset commit. A crash between two steps replays at
// most this batch, and the version checks make the replay a no-op; a zombie
// is not fenced at the broker.
func (t *task) flush(ctx context.Context) error {
	e := t.e
	if len(t.dirty) == 0 && len(t.dead) == 0 && t.next <= t.committed {
		if time.Since(t.verified) >= verifyInterval {
			// An idle partition still confirms its claim now and then, so
			// that a store that lost its state (Redis restarted without
			// persistence) is noticed and the partition restored even
			// without new input.
			return t.write(ctx, Batch{Partition: t.p, Epoch: t.epoch, Checkpoint: t.checkpoint})
		}
		return nil
	}
	docs := make([]MovieStats, 0, len(t.dirty))
	msgs := make([]*sarama.ProducerMessage, 0, 2*len(t.dirty)+len(t.dead))
	for id := range t.dirty {
		d := t.cache.get(id).Clone()
		docs = append(docs, d)
		cl, err := e.changelogRecord(ctx, d)
		if err != nil {
			return err
		}
		msgs = append(msgs, cl, e.averageRecord(d))
	}
	msgs = append(msgs, t.dead...)
	if t.producer != nil {
		if err := t.commitTxn(msgs); err != nil {
			t.drop()
			return err
		}
	} else if len(msgs) > 0 {
		if err := e.producer.SendMessages(msgs); err != nil {
			return fmt.Errorf("send changelog and averages: %w", sendErr(err))
		}
	}
	e.c.dead.Add(int64(len(t.dead)))
	t.dead = nil
	if len(docs) > 0 {
		checkpoint := int64(-1)
		for _, m := range msgs {
			if m.Topic == e.topics.Changelog && m.Offset+1 > checkpoint {
				checkpoint = m.Offset + 1
			}
		}
		if err := t.write(ctx, Batch{Partition: t.p, Epoch: t.epoch, Docs: docs, Checkpoint: checkpoint}); err != nil {
			return err
		}
		e.c.docs.Add(int64(len(docs)))
		t.dirty = map[int64]struct{}{}
		t.cache.trim(e.cfg.CacheMaxDocs)
	}
	if t.producer == nil && t.next > t.committed {
		t.sess.MarkOffset(e.topics.Repartition, t.p, t.next, "")
		t.sess.Commit()
	}
	t.committed = max(t.committed, t.next)
	return nil
}

// commitTxn produces msgs and commits the task's repartition offset in one
// transaction. On any failure it aborts (when the producer still can) and
// returns an error wrapping ErrTxnAborted, and ErrFenced when the broker
// refused this instance as the partition's owner.
func (t *task) commitTxn(msgs []*sarama.ProducerMessage) error {
	e, pr := t.e, t.producer
	step, err := "begin", pr.BeginTxn()
	if err == nil && len(msgs) > 0 {
		step, err = "produce", sendErr(pr.SendMessages(msgs))
	}
	if err == nil && t.next > t.committed {
		offsets := map[string][]*sarama.PartitionOffsetMetadata{
			e.topics.Repartition: {{Partition: t.p, Offset: t.next}},
		}
		step, err = "add offsets", pr.AddOffsetsToTxnWithGroupMetadata(offsets, e.groupMetadata(t.sess))
	}
	if err == nil {
		step, err = "commit", pr.CommitTxn()
	}
	if err == nil {
		e.c.txnCommitted.Add(1)
		return nil
	}
	return e.endTxn(pr, "partition "+itoa(int64(t.p)), step, err)
}

// drop forgets everything the task holds that is not persisted, after a
// flush that was fenced or aborted. The partition is no longer RUNNING
// here, so it is not kept answerable (warm) when the session ends: a new
// owner may already be ahead of this instance's store.
func (t *task) drop() {
	t.cache.reset()
	t.dirty = map[int64]struct{}{}
	t.dead = nil
	t.e.parts.set(t.p, Restoring)
}

// verifyInterval is how often an idle partition confirms its claim.
const verifyInterval = 5 * time.Second

// write applies b to the store, retrying while the store is unavailable. A
// fenced write (another owner claimed the partition, or the store lost the
// claim with its state) drops the task's cache and returns an error
// wrapping ErrFenced, which restarts the group session: the partition is
// then claimed again and restored.
func (t *task) write(ctx context.Context, b Batch) error {
	e := t.e
	err := e.retryUnavailable(ctx, "apply", func() error { return e.store.Apply(ctx, b) })
	if errors.Is(err, ErrFenced) {
		e.c.fenced.Add(1)
		t.drop()
		return fmt.Errorf("partition %d: %w", t.p, err)
	}
	if err != nil {
		return fmt.Errorf("store batch: %w", err)
	}
	e.c.batches.Add(1)
	t.checkpoint = b.Checkpoint
	t.verified = time.Now()
	return nil
}

// changelogRecord is the compacted changelog record of d: key the movie id,
// value Avro CountAndSum, processing metadata in headers.
func (e *Engine) changelogRecord(ctx context.Context, d MovieStats) (*sarama.ProducerMessage, error) {
	v, err := e.serde.EncodeCountAndSum(ctx, e.topics.Changelog+"-value", avro.CountAndSum{Count: d.Count, Sum: d.Sum})
	if err != nil {
		return nil, fmt.Errorf("encode changelog value: %w", err)
	}
	return &sarama.ProducerMessage{
		Topic:     e.topics.Changelog,
		Partition: d.Partition,
		Key:       sarama.ByteEncoder(EncodeMovieKey(d.MovieID)),
		Value:     sarama.ByteEncoder(v),
		Headers: []sarama.RecordHeader{
			header(HeaderVersion, strconv.FormatInt(d.Version, 10)),
			header(HeaderSources, encodeSources(d.Sources)),
		},
	}, nil
}

// averageRecord is the output record of d: 8-byte big-endian long key and
// 8-byte big-endian IEEE-754 double value, as Java's serializers write them.
func (e *Engine) averageRecord(d MovieStats) *sarama.ProducerMessage {
	key := EncodeMovieKey(d.MovieID)
	return &sarama.ProducerMessage{
		Topic:     e.topics.Output,
		Partition: PartitionFor(key, e.nOut),
		Key:       sarama.ByteEncoder(key),
		Value:     sarama.ByteEncoder(EncodeDouble(d.Avg())),
	}
}

// EncodeDouble encodes v as Java's DoubleSerializer does.
func EncodeDouble(v float64) []byte {
	return binary.BigEndian.AppendUint64(nil, math.Float64bits(v))
}

// DecodeDouble decodes a value written by Java's DoubleSerializer; it
// returns ErrInvalid unless b is 8 bytes.
func DecodeDouble(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("double must be 8 bytes, got %d: %w", len(b), ErrInvalid)
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
}
