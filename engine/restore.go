package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// restoreBatchDocs bounds the documents of one replay batch.
const restoreBatchDocs = 5000

// restoreIdle is how long a restore waits for a record below the high
// water mark before deciding the rest of the range holds no records
// (offsets can be missing in a compacted topic).
const restoreIdle = 2 * time.Second

// restore brings the store's copy of the partition up to date with the
// changelog. It is the RESTORING state of a task:
//
//  1. claim the partition (new epoch: fences any previous writer);
//  2. checkpoint present and inside the changelog → replay the records
//     after it (usually none); no checkpoint → replay the whole partition;
//  3. checkpoint beyond the changelog's end (changelog deleted or
//     truncated) → keep the store and re-seed the changelog from it.
//
// Replayed records go through the store's version check, so an old record
// never rolls a document back.
func (t *task) restore(ctx context.Context) error {
	e := t.e
	var epoch, cp int64
	var hasCP bool
	err := e.retryUnavailable(ctx, "claim", func() (err error) {
		if epoch, err = e.store.Claim(ctx, t.p); err != nil {
			return err
		}
		cp, hasCP, err = e.store.Checkpoint(ctx, t.p)
		return err
	})
	if err != nil {
		return err
	}
	t.epoch = epoch
	oldest, err := e.client.GetOffset(e.topics.Changelog, t.p, sarama.OffsetOldest)
	if err != nil {
		return fmt.Errorf("changelog start: %w", err)
	}
	end, err := e.client.GetOffset(e.topics.Changelog, t.p, sarama.OffsetNewest)
	if err != nil {
		return fmt.Errorf("changelog end: %w", err)
	}
	start := oldest
	if hasCP {
		start = max(cp, oldest)
	}
	log := e.log.With("partition", t.p, "checkpoint", cp, "has_checkpoint", hasCP, "changelog_start", oldest, "changelog_end", end)
	if hasCP && cp > end {
		log.Warn("changelog ends before the store's checkpoint (topic deleted or truncated); re-seeding the changelog from the store")
		return t.reseed(ctx)
	}
	t.checkpoint = max(start, end)
	if start >= end {
		log.Info("partition restored", "records", 0)
		return nil
	}
	began := time.Now()
	n, err := t.replay(ctx, start, end)
	if err != nil {
		return err
	}
	log.Info("partition restored", "records", n, "took", time.Since(began))
	return nil
}

// replay applies changelog records [start, end) of the task's partition to
// the store in replay batches and returns how many records it read.
func (t *task) replay(ctx context.Context, start, end int64) (int64, error) {
	e := t.e
	consumer, err := sarama.NewConsumerFromClient(e.client)
	if err != nil {
		return 0, fmt.Errorf("changelog consumer: %w", err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(e.topics.Changelog, t.p, start)
	if err != nil {
		return 0, fmt.Errorf("consume changelog: %w", err)
	}
	defer pc.AsyncClose()
	pending := map[int64]MovieStats{}
	var read int64
	next := start
	write := func() error {
		docs := make([]MovieStats, 0, len(pending))
		for _, d := range pending {
			docs = append(docs, d)
		}
		b := Batch{Partition: t.p, Epoch: t.epoch, Docs: docs, Checkpoint: next, Replay: true}
		if err := e.retryUnavailable(ctx, "replay", func() error { return e.store.Apply(ctx, b) }); err != nil {
			return fmt.Errorf("replay batch: %w", err)
		}
		e.c.batches.Add(1)
		t.checkpoint = next
		pending = map[int64]MovieStats{}
		return nil
	}
	idle := time.NewTimer(restoreIdle)
	defer idle.Stop()
	for next < end {
		select {
		case <-ctx.Done():
			return read, ctx.Err()
		case err := <-pc.Errors():
			return read, fmt.Errorf("read changelog: %w", err)
		case <-idle.C:
			if pc.HighWaterMarkOffset() <= next {
				end = next // the rest of the range holds no records
			}
			idle.Reset(restoreIdle)
		case m := <-pc.Messages():
			idle.Reset(restoreIdle)
			next = m.Offset + 1
			read++
			e.c.restored.Add(1)
			d, err := t.decodeChangelog(ctx, m)
			if err != nil {
				e.log.Warn("skipping unreadable changelog record", "partition", t.p, "offset", m.Offset, "err", err)
			} else if old, ok := pending[d.MovieID]; !ok || d.Version > old.Version {
				pending[d.MovieID] = d
			}
			if len(pending) >= restoreBatchDocs {
				if err := write(); err != nil {
					return read, err
				}
			}
		}
	}
	return read, write()
}

// decodeChangelog turns a changelog record back into a document.
func (t *task) decodeChangelog(ctx context.Context, m *sarama.ConsumerMessage) (MovieStats, error) {
	id, err := DecodeMovieKey(m.Key)
	if err != nil {
		return MovieStats{}, err
	}
	cs, err := t.e.serde.DecodeCountAndSum(ctx, m.Value)
	if err != nil {
		return MovieStats{}, err
	}
	vs, ok := findHeader(m.Headers, HeaderVersion)
	if !ok {
		return MovieStats{}, fmt.Errorf("no %s header: %w", HeaderVersion, ErrInvalid)
	}
	var version int64
	if _, err := fmt.Sscan(vs, &version); err != nil {
		return MovieStats{}, fmt.Errorf("bad %s header %q: %w", HeaderVersion, vs, ErrInvalid)
	}
	ss, _ := findHeader(m.Headers, HeaderSources)
	sources, err := decodeSources(ss)
	if err != nil {
		return MovieStats{}, err
	}
	return MovieStats{MovieID: id, Partition: t.p, Count: cs.Count, Sum: cs.Sum, Version: version, Sources: sources}, nil
}

// reseed produces every stored document of the partition to the changelog
// and moves the checkpoint to the changelog's new end.
func (t *task) reseed(ctx context.Context) error {
	e := t.e
	sc, ok := e.store.(PartitionScanner)
	if !ok {
		return fmt.Errorf("store cannot list partition %d to re-seed the changelog; reset the store", t.p)
	}
	var msgs []*sarama.ProducerMessage
	send := func() error {
		if len(msgs) == 0 {
			return nil
		}
		if err := e.producer.SendMessages(msgs); err != nil {
			return fmt.Errorf("re-seed changelog: %w", err)
		}
		msgs = msgs[:0]
		return nil
	}
	err := sc.ScanPartition(ctx, t.p, func(d MovieStats) error {
		m, err := e.changelogRecord(ctx, d)
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
		if len(msgs) >= restoreBatchDocs {
			return send()
		}
		return nil
	})
	if err == nil {
		err = send()
	}
	if err != nil {
		return err
	}
	end, err := e.client.GetOffset(e.topics.Changelog, t.p, sarama.OffsetNewest)
	if err != nil {
		return fmt.Errorf("changelog end: %w", err)
	}
	b := Batch{Partition: t.p, Epoch: t.epoch, Checkpoint: end, Replay: true}
	t.checkpoint = end
	return e.retryUnavailable(ctx, "checkpoint", func() error { return e.store.Apply(ctx, b) })
}
