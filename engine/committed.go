package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/IBM/sarama"
)

// committedReader reads the committed records of one partition up to a
// given end offset, as a read_committed consumer sees them, and knows
// exactly when it has reached that end: transaction markers, aborted
// records and compaction gaps all move its position forward without
// delivering anything. sarama's PartitionConsumer hides its position past
// control records, so a restore built on it could only guess its end with
// an idle timeout; every changelog written under exactly-once ends in a
// commit marker, so that guess would cost every restart.
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

// listOffset returns the partition's end offset: the high watermark with
// sarama.ReadUncommitted, the last stable offset with sarama.ReadCommitted.
func listOffset(client sarama.Client, topic string, p int32, iso sarama.IsolationLevel) (int64, error) {
	broker, err := client.Leader(topic, p)
	if err != nil {
		return 0, err
	}
	req := sarama.NewOffsetRequest(client.Config().Version)
	req.IsolationLevel = iso
	req.AddBlock(topic, p, sarama.OffsetNewest, 1)
	resp, err := broker.GetAvailableOffsets(req)
	if err != nil {
		_ = client.RefreshMetadata(topic)
		return 0, err
	}
	b := resp.GetBlock(topic, p)
	if b == nil {
		return 0, sarama.ErrIncompleteResponse
	}
	if !errors.Is(b.Err, sarama.ErrNoError) {
		_ = client.RefreshMetadata(topic)
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
// up to it. It polls until ctx ends.
func waitStable(ctx context.Context, client sarama.Client, topic string, p int32) (int64, error) {
	hwm, err := listOffset(client, topic, p, sarama.ReadUncommitted)
	if err != nil {
		return 0, fmt.Errorf("high watermark of %s/%d: %w", topic, p, err)
	}
	backoff := 20 * time.Millisecond
	for {
		lso, err := listOffset(client, topic, p, sarama.ReadCommitted)
		if err != nil {
			return 0, fmt.Errorf("last stable offset of %s/%d: %w", topic, p, err)
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

// read calls fn for each committed data record with start <= offset < end,
// in offset order, and returns when the reader's position reaches end.
// fn's error stops the read and is returned.
func (r *committedReader) read(ctx context.Context, start, end int64, fn func(CommittedRecord) error) error {
	if r.maxBytes <= 0 {
		r.maxBytes = 1 << 20
	}
	next := start
	for next < end {
		if err := ctx.Err(); err != nil {
			return err
		}
		broker, err := r.client.Leader(r.topic, r.p)
		if err != nil {
			return fmt.Errorf("leader of %s/%d: %w", r.topic, r.p, err)
		}
		req := &sarama.FetchRequest{Version: fetchVersion, MaxWaitTime: 250, MinBytes: 1,
			MaxBytes: r.maxBytes, Isolation: sarama.ReadCommitted}
		req.AddBlock(r.topic, r.p, next, r.maxBytes, -1)
		resp, err := broker.Fetch(req)
		if err != nil {
			_ = r.client.RefreshMetadata(r.topic)
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
			continue
		}
		b := resp.GetBlock(r.topic, r.p)
		if b == nil {
			return fmt.Errorf("fetch %s/%d: %w", r.topic, r.p, sarama.ErrIncompleteResponse)
		}
		switch {
		case errors.Is(b.Err, sarama.ErrNoError):
		case errors.Is(b.Err, sarama.ErrOffsetOutOfRange) && b.LogStartOffset > next:
			next = b.LogStartOffset // deleted by retention below the start: nothing to read there
			continue
		case errors.Is(b.Err, sarama.ErrNotLeaderForPartition), errors.Is(b.Err, sarama.ErrLeaderNotAvailable),
			errors.Is(b.Err, sarama.ErrUnknownTopicOrPartition):
			_ = r.client.RefreshMetadata(r.topic)
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
			continue
		default:
			return fmt.Errorf("fetch %s/%d at %d: %w", r.topic, r.p, next, b.Err)
		}
		// The aborted set lives for one response only, as in the Java
		// consumer: the broker lists every aborted transaction that
		// overlaps the fetched range, including one that began before it.
		// Carried over to the next fetch, a producer whose ABORT marker
		// log compaction removed meanwhile (after delete.retention.ms)
		// would stay "aborted" for good, and every later committed batch
		// of that producer (the same transactional id, so every later
		// owner of the partition) would be skipped: lost records.
		aborted := map[int64]struct{}{} // producer ids inside an aborted transaction
		abortedTxns := append([]*sarama.AbortedTransaction(nil), b.AbortedTransactions...)
		sort.Slice(abortedTxns, func(i, j int) bool { return abortedTxns[i].FirstOffset < abortedTxns[j].FirstOffset })
		progressed, partial := false, false
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
			for len(abortedTxns) > 0 && abortedTxns[0].FirstOffset <= last {
				aborted[abortedTxns[0].ProducerID] = struct{}{}
				abortedTxns = abortedTxns[1:]
			}
			if last < next {
				continue
			}
			progressed = true
			switch {
			case rb.Control:
				if isAbortMarker(rb) {
					delete(aborted, rb.ProducerID)
				}
			case rb.IsTransactional && isAborted(aborted, rb.ProducerID):
			default:
				for _, rec := range rb.Records {
					off := rb.FirstOffset + rec.OffsetDelta
					if off < next || off >= end {
						continue
					}
					if err := fn(CommittedRecord{Offset: off, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}); err != nil {
						return err
					}
				}
			}
			next = last + 1
		}
		if !progressed && partial {
			if r.maxBytes >= 1<<30 {
				return fmt.Errorf("fetch %s/%d at %d: record batch larger than 1 GiB", r.topic, r.p, next)
			}
			r.maxBytes *= 2
		}
		if !progressed && !partial && (b.HighWaterMarkOffset <= next ||
			len(b.RecordsSet) == 0 && b.LastStableOffset >= end) {
			// Nothing left below end: the log was truncated since end was
			// read, or the rest of the range was compacted away (a cleaned
			// segment may end in removed records and markers).
			return nil
		}
	}
	return nil
}

func isAborted(aborted map[int64]struct{}, pid int64) bool {
	_, ok := aborted[pid]
	return ok
}

// isAbortMarker reports whether a control batch holds an ABORT marker.
func isAbortMarker(rb *sarama.RecordBatch) bool {
	if len(rb.Records) == 0 || len(rb.Records[0].Key) < 4 {
		return false
	}
	return binary.BigEndian.Uint16(rb.Records[0].Key[2:4]) == controlAbort
}
