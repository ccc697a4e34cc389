package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"
)

// maxDrain bounds how many buffered records a stage takes in one step.
const maxDrain = 2000

// drain returns first plus the records already buffered in ch (at most
// maxDrain), without blocking. The caller is ch's only receiver, so what
// len counts is there to take with a plain receive (cheaper than select).
func drain(first *sarama.ConsumerMessage, ch <-chan *sarama.ConsumerMessage) []*sarama.ConsumerMessage {
	batch := make([]*sarama.ConsumerMessage, 1, min(1+len(ch), maxDrain))
	batch[0] = first
	for len(batch) < maxDrain {
		n := min(len(ch), maxDrain-len(batch))
		if n == 0 {
			return batch
		}
		for ; n > 0; n-- {
			m, ok := <-ch
			if !ok {
				return batch
			}
			batch = append(batch, m)
		}
	}
	return batch
}

// rekey forwards input records to the repartition topic keyed by the job's
// key, with the input position in headers; bad records go to the
// dead-letter topic. Under exactly-once it runs in transactions (see
// rekeyTxn); under at-least-once, offsets are marked only after the broker
// acknowledged the sends, and a member that lost the partition may still
// forward records.
func (e *Engine) rekey(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	if e.cfg.ProcessingGuarantee == ExactlyOnce {
		return e.rekeyTxn(s, c)
	}
	ctx := s.Context()
	lastCommit, pending := time.Now(), false
	commit := func() {
		s.Commit()
		lastCommit, pending = time.Now(), false
	}
	f := newForwarder()
	// Offsets marked after the last commit are committed by the ticker too,
	// so that the input's committed offset catches up once input stops.
	ticker := time.NewTicker(e.cfg.CommitInterval)
	defer ticker.Stop()
	for {
		var first *sarama.ConsumerMessage
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if pending {
				commit()
			}
			continue
		case m, ok := <-c.Messages():
			if !ok {
				return nil
			}
			first = m
		}
		batch := drain(first, c.Messages())
		out, dead, err := e.forward(ctx, f, batch)
		if err != nil {
			return nil // the session ended while the registry was unreachable
		}
		if err := e.producer.SendMessages(out); err != nil {
			return fmt.Errorf("rekey: %w", sendErr(err))
		}
		f.reset() // SendMessages returned every record
		e.c.rekeyed.Add(int64(len(batch) - dead))
		e.c.dead.Add(int64(dead))
		s.MarkMessage(batch[len(batch)-1], "")
		pending = true
		if time.Since(lastCommit) >= e.cfg.CommitInterval {
			commit()
		}
	}
}

// forwarder is the memory a rekey stage builds its repartition records
// in (see forward), reused from one drained batch to the next. It belongs
// to the stage's goroutine.
type forwarder struct {
	a   *recordArena
	out []*sarama.ProducerMessage
}

func newForwarder() *forwarder {
	return &forwarder{a: newRecordArena(maxDrain, 2), out: make([]*sarama.ProducerMessage, 0, maxDrain)}
}

// reset makes the memory of the last forward reusable. Call it only once
// sarama has returned every record of that batch (SendMessages returned).
func (f *forwarder) reset() {
	f.a.reset()
	clear(f.out)
	f.out = f.out[:0]
}

// forward builds the repartition records (and dead letters) of a batch of
// input records; dead is how many went to the dead-letter topic. It fails
// only when ctx ends while the registry is unreachable. The records are
// built in f's memory, valid until f.reset.
func (e *Engine) forward(ctx context.Context, f *forwarder, batch []*sarama.ConsumerMessage) (out []*sarama.ProducerMessage, dead int, err error) {
	a := f.a
	out = f.out[:0]
	for _, m := range batch {
		key, err := e.recordKey(ctx, a, m.Value)
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, ctx.Err()
			}
			out = append(out, e.deadLetter(m, err))
			dead++
			continue
		}
		if n := len(m.Value) + len(key) + repartitionOverhead; n > MaxRecordBytes {
			out = append(out, e.deadLetter(m, fmt.Errorf("%w: %d bytes, the repartition limit is %d", ErrRecordTooLarge, n, MaxRecordBytes)))
			dead++
			continue
		}
		pm := a.msg()
		pm.Topic, pm.Partition = e.topics.Repartition, PartitionFor(key, e.nParts)
		pm.Key, pm.Value = a.enc(key), a.enc(m.Value)
		pm.Headers = a.headers(2)
		pm.Headers[0] = sarama.RecordHeader{Key: keySourcePartition, Value: a.int(int64(m.Partition))}
		pm.Headers[1] = sarama.RecordHeader{Key: keySourceOffset, Value: a.int(m.Offset)}
		out = append(out, pm)
	}
	f.out = out // keeps a grown array for the next batch
	return out, dead, nil
}

// withRetry runs a job's decoding step, retrying with backoff while it
// fails temporarily (a Schema Registry outage). Any other failure is
// returned and the record is dead-lettered; ctx ending returns ctx.Err().
func (e *Engine) withRetry(ctx context.Context, fn func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || !errors.Is(err, ErrRetry) {
			return err
		}
		e.log.Warn("decoder temporarily unavailable, retrying", "err", err, "retry_in", backoff)
		if !sleepCtx(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// recordKey decodes an input record with the job and returns its record
// key, in a's bytes.
func (e *Engine) recordKey(ctx context.Context, a *recordArena, value []byte) ([]byte, error) {
	var key []byte
	err := e.withRetry(ctx, func() error {
		a.reserve(64)
		start := len(a.buf)
		buf, err := e.job.AppendKey(ctx, a.buf, value)
		if err != nil {
			return err
		}
		a.buf = buf
		key = a.cut(start)
		return nil
	})
	return key, err
}

// addRecord adds a repartition record to agg with the job.
func (e *Engine) addRecord(ctx context.Context, agg Agg, key, value []byte) error {
	return e.withRetry(ctx, func() error { return e.job.Add(ctx, agg, key, value) })
}

// ErrRecordTooLarge is the dead-letter reason of a valid record too large
// to be forwarded (see MaxRecordBytes).
var ErrRecordTooLarge = errors.New("record too large")

// repartitionOverhead bounds what the rekey adds to a record: the 8-byte
// key, the source headers and the record framing.
const repartitionOverhead = 256

// maxReasonBytes bounds the dead-letter reason header.
const maxReasonBytes = 1024

// dlqValueBytes is the largest value a dead letter keeps; a larger one is
// cut to it, with HeaderDLQTruncated and the original size in
// HeaderDLQOriginalSize, so the dead letter always fits the producer's and
// the topic's limits.
const dlqValueBytes = MaxRecordBytes - 64*1024

// deadLetter builds the dead-letter record for m with the reason and the
// original position in headers. The key and value are kept, but a value
// too large to produce is truncated (see dlqValueBytes): a poison pill
// must never stop the stream.
func (e *Engine) deadLetter(m *sarama.ConsumerMessage, reason error) *sarama.ProducerMessage {
	e.log.Warn("dead-lettering record", "topic", m.Topic, "partition", m.Partition, "offset", m.Offset,
		"bytes", len(m.Value), "reason", reason)
	msg := reason.Error()
	if len(msg) > maxReasonBytes {
		msg = msg[:maxReasonBytes] + "..."
	}
	pm := &sarama.ProducerMessage{
		Topic:     e.topics.DLQ,
		Partition: m.Partition % e.nDLQ,
		Value:     sarama.ByteEncoder(m.Value),
		Headers: []sarama.RecordHeader{
			header(HeaderDLQReason, msg),
			header(HeaderDLQTopic, m.Topic),
			header(HeaderDLQPartition, strconv.FormatInt(int64(m.Partition), 10)),
			header(HeaderDLQOffset, strconv.FormatInt(m.Offset, 10)),
		},
	}
	if len(m.Value) > dlqValueBytes {
		pm.Value = sarama.ByteEncoder(m.Value[:dlqValueBytes])
		pm.Headers = append(pm.Headers,
			header(HeaderDLQTruncated, "true"),
			header(HeaderDLQOriginalSize, strconv.Itoa(len(m.Value))))
	}
	if m.Key != nil {
		key := m.Key
		if len(key) > maxReasonBytes*16 {
			key = key[:maxReasonBytes*16]
		}
		pm.Key = sarama.ByteEncoder(key)
	}
	return pm
}
