package engine

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// restoreBatchDocs bounds the documents of one replay batch of a
// partition the store has no copy of (a full restore, often into an empty
// table, which the store loads in bulk).
const restoreBatchDocs = 5000

// catchUpBatchDocs bounds the documents of one replay batch onto a copy
// (a standby's tail, a warm-up, a moved partition's catch-up). A store
// applies a batch under its write lock, reading each key's stored
// document, and the actives' flushes wait behind it: batches of 5000 cold
// reads held that lock for up to 1 s while partitions moved; with 1000 the
// flushes waited less than half as long (docs/design.md).
const catchUpBatchDocs = 1000

// restore brings the store's copy of the partition up to date with the
// changelog. It is the RESTORING state of a task:
//
//  1. exactly-once: open the partition's transactional producer, which
//     fences earlier owners' producers and aborts their open transaction;
//  2. claim the partition in the store (a new epoch fences older writers);
//  3. wait until the changelog's last stable offset reaches its high
//     watermark (every transaction below it decided);
//  4. replay the committed records after the checkpoint (all without
//     one); a checkpoint beyond the changelog's end (deleted or truncated)
//     keeps the store and re-seeds the changelog from it.
//
// Replayed records go through the store's version check.
func (t *task) restore(ctx context.Context) error {
	e := t.e
	began := time.Now()
	if e.cfg.ProcessingGuarantee == ExactlyOnce {
		pr, r, err := e.openTaskProducer(ctx, t.p)
		if err != nil {
			return err
		}
		t.producer, t.retry = pr, r
	}
	fenced := time.Since(began)
	var cp int64
	var hasCP bool
	err := e.retryUnavailable(ctx, "claim", func() (err error) {
		if t.epoch, err = e.table.Claim(ctx, t.p); err != nil {
			return err
		}
		cp, hasCP, err = e.table.Checkpoint(ctx, t.p)
		return err
	})
	if err != nil {
		return err
	}
	claimed := time.Since(began)
	oldest, err := e.clog.Start(ctx, e.topics.Changelog, t.p)
	if err != nil {
		return fmt.Errorf("changelog start: %w", err)
	}
	end, err := e.clog.StableEnd(ctx, e.topics.Changelog, t.p)
	if err != nil {
		return err
	}
	start := oldest
	if hasCP {
		start = max(cp, oldest)
	}
	// fenced, claimed and setup (with the wait for the last stable
	// offset) count from the restore's start.
	log := e.log.With("partition", t.p, "checkpoint", cp, "has_checkpoint", hasCP, "changelog_start", oldest, "changelog_end", end,
		"fenced", fenced, "claimed", claimed, "setup", time.Since(began))
	if hasCP && cp > end {
		log.Warn("changelog ends before the store's checkpoint (topic deleted or truncated); re-seeding the changelog from the store")
		return t.reseed(ctx)
	}
	if !hasCP || end > cp+1 {
		// The changelog goes on past this store's last flush (and its
		// commit marker): the copy is behind and must not answer while it
		// catches up (see handover.go).
		e.route.parts.unwarm(t.p)
	}
	t.checkpoint = max(start, end)
	e.copies.set(t.p, t.checkpoint)
	if hasCP && end-start <= e.cfg.AcceptableLag {
		// A copy this close answers as a standby would while it catches up.
		e.standby.restoringFrom(t.p, start, end)
	}
	if start >= end {
		log.Info("partition restored", "records", 0)
		return nil
	}
	began = time.Now()
	batch := restoreBatchDocs
	if hasCP {
		batch = catchUpBatchDocs
	}
	n, err := t.replay(ctx, start, end, batch)
	if err != nil {
		return err
	}
	log.Info("partition restored", "records", n, "took", time.Since(began))
	return nil
}

// replay replays [start, end) of the task's partition in batches of at
// most batch documents (see Engine.replay); the last batch moves the
// checkpoint to end, past the final marker.
func (t *task) replay(ctx context.Context, start, end int64, batch int) (int64, error) {
	n, _, err := t.e.replay(ctx, t.p, t.epoch, start, end, 0, batch, &t.e.c.restored)
	if err == nil {
		t.checkpoint = end
	}
	return n, err
}

// errReplayLimit ends a replay that has read its limit of records.
var errReplayLimit = errors.New("replay limit reached")

// replay applies the committed changelog records in [start, end) of
// partition p to the store, under epoch, in replay batches of at most
// batch documents (the last version of each key). It returns
// how many records it read (each adds one to counter) and the checkpoint
// it wrote last: end, or, when it stopped after limit > 0 records, one
// past the last record applied.
func (e *Engine) replay(ctx context.Context, p int32, epoch, start, end, limit int64, batch int, counter *atomic.Int64) (read, checkpoint int64, err error) {
	pending := map[string]Doc{}
	checkpoint = start
	meter := e.meters.get(p)
	write := func(cp int64) error {
		docs := slices.Collect(maps.Values(pending))
		b := DocBatch{Partition: p, Epoch: epoch, Docs: docs, Checkpoint: cp, Replay: true}
		if err := e.retryUnavailable(ctx, "replay", func() error { return e.table.Apply(ctx, b) }); err != nil {
			return fmt.Errorf("replay batch: %w", err)
		}
		e.c.batches.Add(1)
		e.copies.set(p, cp)
		checkpoint = cp
		pending = map[string]Doc{}
		return nil
	}
	err = e.clog.ReadCommitted(ctx, e.topics.Changelog, p, start, end, func(m CommittedRecord) error {
		read++
		counter.Add(1)
		meter.n.Add(1)
		// An unavailable decoder (the Schema Registry down) is waited for:
		// skipping would move the checkpoint past records the state lacks.
		// Only an unreadable record is skipped.
		var d Doc
		err := e.withRetry(ctx, func() (err error) {
			d, err = e.decodeChangelog(ctx, p, m)
			return err
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			e.c.changelogSkipped.Add(1)
			e.log.Warn("skipping unreadable changelog record", "partition", p, "offset", m.Offset, "err", err)
		} else if old, ok := pending[string(d.Key)]; !ok || d.Version > old.Version {
			pending[string(d.Key)] = d
		}
		if limit > 0 && read >= limit {
			return cmp.Or(write(m.Offset+1), errReplayLimit)
		}
		if len(pending) >= batch {
			return write(m.Offset + 1)
		}
		return nil
	})
	if errors.Is(err, errReplayLimit) {
		return read, checkpoint, nil
	}
	if err != nil {
		return read, checkpoint, fmt.Errorf("read changelog: %w", err)
	}
	return read, end, write(end)
}

// decodeChangelog turns a changelog record of partition p back into a
// document.
func (e *Engine) decodeChangelog(ctx context.Context, p int32, m CommittedRecord) (Doc, error) {
	if err := e.job.CheckKey(m.Key); err != nil {
		return Doc{}, err
	}
	agg, err := e.job.DecodeChangelog(ctx, e.topics.Changelog, m.Value)
	if err != nil {
		return Doc{}, err
	}
	vs, ok := findHeaderBytes(m.Headers, HeaderVersion)
	if !ok {
		return Doc{}, fmt.Errorf("no %s header: %w", HeaderVersion, ErrInvalid)
	}
	version, err := strconv.ParseInt(string(vs), 10, 64)
	if err != nil {
		return Doc{}, fmt.Errorf("bad %s header %q: %w", HeaderVersion, vs, ErrInvalid)
	}
	ss, _ := findHeaderBytes(m.Headers, HeaderSources)
	sources, err := decodeSources(string(ss))
	if err != nil {
		return Doc{}, err
	}
	value, err := agg.AppendValue(ctx, nil)
	if err != nil {
		return Doc{}, err
	}
	return Doc{Key: bytes.Clone(m.Key), Partition: p, Version: version, Sources: sources,
		Value: value, Index: agg.AppendIndex(nil)}, nil
}

// reseed produces every stored document of the partition to the changelog
// (under exactly-once in transactions of the partition's fenced producer)
// and moves the checkpoint past the last record it wrote.
func (t *task) reseed(ctx context.Context) error {
	e := t.e
	sc, ok := e.table.(TableScanner)
	if !ok {
		return fmt.Errorf("store cannot list partition %d to re-seed the changelog; reset the store", t.p)
	}
	checkpoint := int64(-1)
	var msgs []*sarama.ProducerMessage
	a := newRecordArena(restoreBatchDocs, 2)
	send := func() error {
		if len(msgs) == 0 {
			return nil
		}
		var err error
		if t.producer != nil {
			err = t.commitTxn(msgs, t.next, t.next > t.committed)
		} else if err = e.producer.SendMessages(msgs); err != nil {
			err = fmt.Errorf("re-seed changelog: %w", sendErr(err))
		}
		if err != nil {
			return err
		}
		for _, m := range msgs {
			checkpoint = max(checkpoint, m.Offset+1)
		}
		msgs = msgs[:0]
		return nil
	}
	err := sc.ScanPartition(ctx, t.p, func(d Doc) error {
		// The records outlive fn: keep nothing the store may reuse.
		d = d.Clone()
		agg, err := e.job.DecodeValue(ctx, d.Value)
		if err != nil {
			return fmt.Errorf("re-seed document %s: %w", e.job.FormatKey(d.Key), err)
		}
		m, err := e.changelogRecord(ctx, d, agg, a)
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
	if checkpoint < 0 { // nothing stored: the changelog's end is the checkpoint
		if checkpoint, err = e.clog.StableEnd(ctx, e.topics.Changelog, t.p); err != nil {
			return err
		}
	}
	b := DocBatch{Partition: t.p, Epoch: t.epoch, Checkpoint: checkpoint, Replay: true}
	t.checkpoint = checkpoint
	if err := e.retryUnavailable(ctx, "checkpoint", func() error { return e.table.Apply(ctx, b) }); err != nil {
		return err
	}
	e.copies.set(t.p, checkpoint)
	return nil
}
