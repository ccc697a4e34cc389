package testkit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/IBM/sarama"
)

// CommittedRecord is a committed data record and the producer that wrote it.
type CommittedRecord struct {
	Offset     int64
	Key, Value []byte
	Headers    []*sarama.RecordHeader
	ProducerID int64
	Epoch      int16
}

// ReadCommittedByMarkers returns the committed data records of topic/p in
// offset order: the tests' oracle for what read_committed readers must see,
// independent of the broker's aborted-transaction index (which the engine,
// like every Kafka client, trusts). It reads every batch read_uncommitted
// and decides each transactional record by its producer's next control
// marker (COMMIT or ABORT; none yet: not committed). Compaction keeps a
// marker while any of its records remain, so compacted topics work too. It
// first waits (until ctx ends) for the last stable offset to reach the
// high watermark.
func ReadCommittedByMarkers(ctx context.Context, client sarama.Client, topic string, p int32) ([]CommittedRecord, error) {
	hwm, err := waitStableEnd(ctx, client, topic, p)
	if err != nil {
		return nil, err
	}
	var (
		out     []CommittedRecord
		pending = map[int64][]CommittedRecord{} // open transactional records per producer
		next    int64
	)
	for next < hwm || len(pending) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if next >= hwm {
			// A transaction with records below the end was decided, but
			// its marker was written after the end was read.
			if hwm, err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
				return nil, err
			}
			if next >= hwm {
				select {
				case <-ctx.Done():
					return nil, fmt.Errorf("%s/%d: %d producers' records without a marker: %w", topic, p, len(pending), ctx.Err())
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
		}
		broker, err := client.Leader(topic, p)
		if err != nil {
			return nil, err
		}
		req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 100, MinBytes: 1, MaxBytes: 8 << 20, Isolation: sarama.ReadUncommitted}
		req.AddBlock(topic, p, next, 8<<20, -1)
		resp, err := broker.Fetch(req)
		if err != nil {
			return nil, fmt.Errorf("fetch %s/%d at %d: %w", topic, p, next, err)
		}
		b := resp.GetBlock(topic, p)
		if b == nil {
			return nil, fmt.Errorf("fetch %s/%d: %w", topic, p, sarama.ErrIncompleteResponse)
		}
		if errors.Is(b.Err, sarama.ErrOffsetOutOfRange) && b.LogStartOffset > next {
			next = b.LogStartOffset
			continue
		}
		if !errors.Is(b.Err, sarama.ErrNoError) {
			return nil, fmt.Errorf("fetch %s/%d at %d: %w", topic, p, next, b.Err)
		}
		progressed := false
		for _, rs := range b.RecordsSet {
			rb := rs.RecordBatch
			if rb == nil {
				return nil, fmt.Errorf("fetch %s/%d: legacy message format", topic, p)
			}
			if rb.PartialTrailingRecord {
				break
			}
			last := rb.FirstOffset + int64(rb.LastOffsetDelta)
			if last < next {
				continue
			}
			progressed = true
			next = last + 1
			if rb.Control {
				if len(rb.Records) == 0 || len(rb.Records[0].Key) < 4 {
					return nil, fmt.Errorf("%s/%d: control batch at %d without a marker key", topic, p, rb.FirstOffset)
				}
				if rb.Records[0].Key[3] == 1 { // COMMIT (0 is ABORT)
					out = append(out, pending[rb.ProducerID]...)
				}
				delete(pending, rb.ProducerID)
				continue
			}
			for _, r := range rb.Records {
				cr := CommittedRecord{Offset: rb.FirstOffset + r.OffsetDelta, Key: r.Key, Value: r.Value,
					Headers: r.Headers, ProducerID: rb.ProducerID, Epoch: rb.ProducerEpoch}
				if rb.IsTransactional {
					pending[rb.ProducerID] = append(pending[rb.ProducerID], cr)
				} else {
					out = append(out, cr)
				}
			}
		}
		if !progressed && !b.Partial {
			// Batches emptied by compaction only: sarama drops them from
			// RecordsSet but records where they end (as engine.batchesEnd).
			if f := reflect.ValueOf(b).Elem().FieldByName("recordsNextOffset"); f.IsValid() && f.Kind() == reflect.Pointer && !f.IsNil() {
				if n := f.Elem().Int(); n > next && n <= b.HighWaterMarkOffset {
					next, progressed = n, true
				}
			}
		}
		if !progressed && b.HighWaterMarkOffset > next {
			return nil, fmt.Errorf("fetch %s/%d at %d: no progress (hwm %d)", topic, p, next, b.HighWaterMarkOffset)
		}
	}
	slices.SortFunc(out, func(a, b CommittedRecord) int { return cmp.Compare(a.Offset, b.Offset) })
	return out, nil
}

// waitStableEnd returns topic/p's high watermark once the last stable
// offset reached it.
func waitStableEnd(ctx context.Context, client sarama.Client, topic string, p int32) (int64, error) {
	for {
		hwm, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return 0, err
		}
		broker, err := client.Leader(topic, p)
		if err != nil {
			return 0, err
		}
		req := sarama.NewOffsetRequest(client.Config().Version)
		req.IsolationLevel = sarama.ReadCommitted
		req.AddBlock(topic, p, sarama.OffsetNewest, 1)
		resp, err := broker.GetAvailableOffsets(req)
		if err != nil {
			return 0, err
		}
		blk := resp.GetBlock(topic, p)
		if blk == nil || !errors.Is(blk.Err, sarama.ErrNoError) {
			return 0, fmt.Errorf("last stable offset of %s/%d: %v", topic, p, blk)
		}
		if blk.Offset >= hwm {
			return hwm, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s/%d: last stable offset %d below high watermark %d: %w", topic, p, blk.Offset, hwm, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
