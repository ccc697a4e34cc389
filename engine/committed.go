package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// committedReader reads the committed records of one partition up to a
// given end offset, as a read_committed consumer sees them (see read), and
// knows exactly when it has reached that end, which sarama's
// PartitionConsumer hides past control records.
type committedReader struct {
	client sarama.Client
	topic  string
	p      int32
	// maxBytes is the per-partition fetch size; it doubles when one
	// record batch does not fit.
	maxBytes int32
}

// CommittedRecord is one committed data record of a partition.
type CommittedRecord struct {
	Offset  int64
	Key     []byte
	Value   []byte
	Headers []*sarama.RecordHeader
}

// ReadCommitted calls fn, in offset order, for every committed record of
// topic/p from the log start to the partition's end as of the call, as a
// read_committed consumer sees them: records of aborted transactions and
// transaction markers are skipped. It first waits until every transaction
// below the end is decided, so it returns only once it has read everything
// committed up to there, or when ctx ends or fn fails. It may be called
// concurrently; client must be open.
func ReadCommitted(ctx context.Context, client sarama.Client, topic string, p int32, fn func(CommittedRecord) error) error {
	start, err := client.GetOffset(topic, p, sarama.OffsetOldest)
	if err != nil {
		return fmt.Errorf("start of %s/%d: %w", topic, p, err)
	}
	end, err := waitStable(ctx, client, topic, p)
	if err != nil {
		return err
	}
	r := committedReader{client: client, topic: topic, p: p}
	return r.read(ctx, start, end, fn)
}

// controlAbort is the type of an ABORT control record (key: int16 version, int16 type).
const controlAbort = 0

// fetchVersion is the Fetch API version used: 11 has isolation levels,
// aborted-transaction lists and log start offsets, and still names topics
// (v13 switched to topic ids). Kafka 2.3 and later serve it.
const fetchVersion = 11

// errLeaderGone marks a request for a partition's offsets that failed on
// its way (the leader's broker died, was fenced or cut off) or found no
// leader (an election under way): retried, it succeeds once Kafka has a
// new leader.
var errLeaderGone = errors.New("partition leader unreachable")

// listOffset returns the partition's offset at ts: sarama.OffsetOldest
// (the log start), or sarama.OffsetNewest, the end: the high watermark
// with sarama.ReadUncommitted, the last stable offset with
// sarama.ReadCommitted. It retries while the leader is gone (backing off
// from 100 ms to 1 s), so a leader failover delays a restore or a standby
// instead of failing it, and returns ctx's error if ctx ends first.
// Its errors say "what of topic/p: ".
func listOffset(ctx context.Context, client sarama.Client, topic string, p int32, ts int64, iso sarama.IsolationLevel,
	what string) (int64, error) {
	for backoff := 100 * time.Millisecond; ; backoff = min(backoff*2, time.Second) {
		n, err := listOffsetOnce(client, topic, p, ts, iso)
		if errors.Is(err, errLeaderGone) {
			if sleepCtx(ctx, backoff) {
				continue
			}
			err = ctx.Err()
		}
		if err != nil {
			return 0, fmt.Errorf("%s of %s/%d: %w", what, topic, p, err)
		}
		return n, nil
	}
}

// listOffsetOnce is one try of listOffset; its errors wrap errLeaderGone
// where a retry may succeed.
func listOffsetOnce(client sarama.Client, topic string, p int32, ts int64, iso sarama.IsolationLevel) (int64, error) {
	broker, err := client.Leader(topic, p)
	if err != nil {
		if errors.Is(err, sarama.ErrLeaderNotAvailable) || errors.Is(err, sarama.ErrOutOfBrokers) || errors.Is(err, sarama.ErrNotLeaderForPartition) {
			err = fmt.Errorf("%w: %w", errLeaderGone, err)
		}
		return 0, err
	}
	req := sarama.NewOffsetRequest(client.Config().Version)
	req.IsolationLevel = iso
	req.AddBlock(topic, p, ts, 1)
	resp, err := broker.GetAvailableOffsets(req)
	if err != nil {
		_ = broker.Close() // sarama keeps a connection whose read timed out, dead, until closed
		_ = client.RefreshMetadata(topic)
		return 0, fmt.Errorf("%w: %w", errLeaderGone, err)
	}
	b := resp.GetBlock(topic, p)
	if b == nil {
		return 0, sarama.ErrIncompleteResponse
	}
	if !errors.Is(b.Err, sarama.ErrNoError) {
		_ = client.RefreshMetadata(topic)
		if errors.Is(b.Err, sarama.ErrNotLeaderForPartition) || errors.Is(b.Err, sarama.ErrLeaderNotAvailable) {
			return 0, fmt.Errorf("%w: %w", errLeaderGone, b.Err)
		}
		return 0, b.Err
	}
	if b.Offset != 0 || len(b.Offsets) == 0 {
		return b.Offset, nil
	}
	return b.Offsets[0], nil
}

// waitStable returns the high watermark of the partition once its last
// stable offset has reached it: every transaction that wrote below it is
// then decided (committed or aborted), so a read_committed reader can read
// everything below it. It polls until ctx ends.
func waitStable(ctx context.Context, client sarama.Client, topic string, p int32) (int64, error) {
	hwm, err := listOffset(ctx, client, topic, p, sarama.OffsetNewest, sarama.ReadUncommitted, "high watermark")
	if err != nil {
		return 0, err
	}
	backoff := 20 * time.Millisecond
	for {
		lso, err := listOffset(ctx, client, topic, p, sarama.OffsetNewest, sarama.ReadCommitted, "last stable offset")
		if err != nil {
			return 0, err
		}
		if lso >= hwm {
			return hwm, nil
		}
		if !sleepCtx(ctx, backoff) {
			return 0, ctx.Err()
		}
		backoff = min(backoff*2, time.Second)
	}
}

// maxEmptyFetches bounds how many fetches in a row may return nothing
// below the end before read gives up with an error (never silently).
const maxEmptyFetches = 100

// queued is a record waiting in offset order until its transaction is
// decided.
type queued struct {
	rec     CommittedRecord
	pending bool // its producer's marker is not read yet
	aborted bool
}

// read calls fn for each committed data record with start <= offset < end,
// in offset order, and returns when every record below end is delivered or
// skipped. fn's error stops the read and is returned.
//
// It fetches read_uncommitted and decides each transactional record by its
// producer's next control marker, not by the broker's aborted-transaction
// index: on Apache Kafka a read_committed fetch below the last stable
// offset could come back empty just after the changelog was cleaned,
// which looks like the end of the data. The caller has waited for the
// last stable offset to reach end (waitStable), so every transaction with
// records below end has its marker written (compaction keeps a marker as
// long as a record of its transaction remains); a record whose marker
// lies beyond end is held until the marker is read.
func (r *committedReader) read(ctx context.Context, start, end int64, fn func(CommittedRecord) error) error {
	if r.maxBytes <= 0 {
		r.maxBytes = 1 << 20
	}
	var (
		next  = start
		queue []*queued
		open  = map[int64][]*queued{} // undecided records per producer
		epoch = map[int64]int16{}     // producer epoch of the undecided records
		empty = 0
	)
	deliver := func() error {
		n := 0
		for ; n < len(queue) && !queue[n].pending; n++ {
			if !queue[n].aborted {
				if err := fn(queue[n].rec); err != nil {
					return err
				}
			}
		}
		queue = queue[n:]
		return nil
	}
	for next < end || len(open) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		broker, err := r.client.Leader(r.topic, r.p)
		if err != nil {
			return fmt.Errorf("leader of %s/%d: %w", r.topic, r.p, err)
		}
		req := &sarama.FetchRequest{Version: fetchVersion, MaxWaitTime: 250, MinBytes: 1,
			MaxBytes: r.maxBytes, Isolation: sarama.ReadUncommitted, SessionEpoch: -1}
		req.AddBlock(r.topic, r.p, next, r.maxBytes, -1)
		resp, err := broker.Fetch(req)
		var b *sarama.FetchResponseBlock
		if err != nil {
			_ = broker.Close() // sarama keeps a connection whose read timed out, dead, until closed
		} else if b = resp.GetBlock(r.topic, r.p); b == nil {
			return fmt.Errorf("fetch %s/%d: %w", r.topic, r.p, sarama.ErrIncompleteResponse)
		}
		switch {
		case err == nil && errors.Is(b.Err, sarama.ErrNoError):
		case err == nil && errors.Is(b.Err, sarama.ErrOffsetOutOfRange) && b.LogStartOffset > next:
			next = b.LogStartOffset // deleted by retention below the start: nothing to read there
			continue
		case err != nil, errors.Is(b.Err, sarama.ErrNotLeaderForPartition), errors.Is(b.Err, sarama.ErrLeaderNotAvailable),
			errors.Is(b.Err, sarama.ErrUnknownTopicOrPartition):
			_ = r.client.RefreshMetadata(r.topic)
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
			continue
		default:
			return fmt.Errorf("fetch %s/%d at %d: %w", r.topic, r.p, next, b.Err)
		}
		progressed, partial := false, b.Partial
		for _, rs := range b.RecordsSet {
			rb := rs.RecordBatch
			if rb == nil {
				return fmt.Errorf("fetch %s/%d: legacy message format is not supported", r.topic, r.p)
			}
			if rb.PartialTrailingRecord {
				partial = true
				break
			}
			last := rb.FirstOffset + int64(rb.LastOffsetDelta)
			if last < next {
				continue
			}
			progressed = true
			next = last + 1
			if rb.Control {
				for _, q := range open[rb.ProducerID] {
					q.pending, q.aborted = false, isAbortMarker(rb)
				}
				delete(open, rb.ProducerID)
				delete(epoch, rb.ProducerID)
				continue
			}
			if e, ok := epoch[rb.ProducerID]; ok && rb.IsTransactional && rb.ProducerEpoch > e {
				// Records of a newer epoch while older ones wait for their
				// marker: compaction removed that marker between two fetches.
				// The engine never reuses a producer after an abort, so the
				// older records are aborted, or committed and superseded by
				// later records of the same keys: skipping them is right.
				for _, q := range open[rb.ProducerID] {
					q.pending, q.aborted = false, true
				}
				delete(open, rb.ProducerID)
			}
			for _, rec := range rb.Records {
				off := rb.FirstOffset + rec.OffsetDelta
				if off < start || off >= end {
					continue
				}
				q := &queued{rec: CommittedRecord{Offset: off, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}}
				if rb.IsTransactional {
					q.pending = true
					open[rb.ProducerID] = append(open[rb.ProducerID], q)
					epoch[rb.ProducerID] = rb.ProducerEpoch
				}
				queue = append(queue, q)
			}
		}
		if !progressed && !partial {
			// Only batches that compaction emptied (see batchesEnd): they
			// hold nothing to deliver or decide, so step past them.
			if n, ok := batchesEnd(b); ok && n > next && n <= b.HighWaterMarkOffset {
				next, progressed = n, true
			}
		}
		if err := deliver(); err != nil {
			return err
		}
		switch {
		case progressed:
			empty = 0
		case partial:
			if r.maxBytes >= 1<<30 {
				return fmt.Errorf("fetch %s/%d at %d: record batch larger than 1 GiB", r.topic, r.p, next)
			}
			r.maxBytes *= 2
		case b.HighWaterMarkOffset <= next && len(open) == 0:
			return nil // the log was truncated below end since end was read
		default:
			// Nothing returned although the log goes on: wait and fetch
			// again, but never take it for the end.
			if empty++; empty > maxEmptyFetches {
				return fmt.Errorf("fetch %s/%d at %d: no data after %d tries (high watermark %d, %d producers undecided)",
					r.topic, r.p, next, empty, b.HighWaterMarkOffset, len(open))
			}
			if !sleepCtx(ctx, min(time.Duration(empty)*20*time.Millisecond, time.Second)) {
				return ctx.Err()
			}
		}
	}
	return deliver()
}

// isAbortMarker reports whether a control batch holds an ABORT marker.
func isAbortMarker(rb *sarama.RecordBatch) bool {
	if len(rb.Records) == 0 || len(rb.Records[0].Key) < 4 {
		return false
	}
	return binary.BigEndian.Uint16(rb.Records[0].Key[2:4]) == controlAbort
}
