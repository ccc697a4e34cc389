package docstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// tableBulk is the state of a table's bulk load: a restore into an empty
// table. It starts with the first replay batch into an empty partition of
// a table that holds no documents, and covers every partition of the
// table that starts the same way while it lasts. While it is on, the
// table's write cache is pinned and holds every document the load wrote,
// so a key the cache does not know is new: its batches read nothing. The
// batches are buffered (their documents, not copies, see table.Apply, and
// the partitions' checkpoints), the newest version of each key once, and
// written out as sorted files that Pebble ingests (table_ingest.go).
//
// The buffer is written out before anything reads the table (table.read)
// or writes it otherwise (tableWrite), in the background when it holds
// Store.ingestChunk documents (while the next batches buffer), when no
// bulk batch has arrived for ingestIdle, and on Close. So every read sees
// every batch Apply accepted. What changes is durability: a bulk batch is
// durable once its buffer is written out, not when Apply returns. A crash
// before then leaves the partition as of the last buffer written out (or
// empty), so the next start restores the rest again; nothing the engine
// committed to Kafka depends on a restore's batches.
//
// A full cache does not end the load: the keys it cannot hold are
// remembered approximately (seenKeys), and only a key that may have been
// written before is read. Any other write to the table (a batch of
// documents that is not a replay, replays into a partition that was not
// empty, a drop, a reset; not a checkpoint alone, which ends a
// partition's restore) ends the load, and so does a crash: later batches
// read what the cache does not hold. It runs only on an engine that
// ingests (kvIngester: Pebble). Guarded by Store.wmu.
type tableBulk struct {
	on    bool
	t     *table // a handle of the table (its spec and layout)
	parts map[int32]bool
	// docs and checkpoints are the buffer: batches not written out yet,
	// one document per key (add); at holds each key's position in docs.
	docs        []engine.Doc
	at          map[string]int32
	checkpoints map[int32]int64
	timer       *time.Timer     // writes the buffer out after ingestIdle
	job         *tableIngestJob // the buffer being ingested, or nil
	// overflow is set when the full cache refused a document the load
	// wrote: the cache no longer knows every document, so from the next
	// buffer on, a key it does not hold is read when seen may hold it.
	overflow bool
	// seen holds every key the load has written out.
	seen seenKeys
	// holding is set while the load holds the store's compactions back
	// (kvIngester.holdCompactions): from a batch on, until the load ends
	// or no batch has come for holdIdle. last is when the last one came.
	holding bool
	last    time.Time
}

// holdIdle is how long a bulk load goes without batches before it lets
// compactions run again: a restore that has caught up merges what it
// ingested, while short pauses in its fetches do not.
const holdIdle = time.Second

// holdCompactions starts or ends the load's hold on compactions.
func (s *Store) holdCompactions(b *tableBulk, on bool) {
	if b.holding != on {
		b.holding = on
		s.kv.(kvIngester).holdCompactions(on)
		s.log.Debug("docstore table bulk load and compactions", "table", b.t.spec.Name, "held", on)
	}
}

func (b *tableBulk) empty() bool { return len(b.docs) == 0 && len(b.checkpoints) == 0 }

// applyBulk is Apply's bulk-load path: it buffers b when the table is in
// (or can start) a bulk load; handled is false when b must take the
// ordinary path (which ends the load when b holds documents).
func (t *table) applyBulk(ctx context.Context, b engine.DocBatch) (handled bool, err error) {
	s := t.s
	if _, ok := s.kv.(kvIngester); !ok || !b.Replay || s.noBulk || s.cacheMax == 0 {
		return false, nil
	}
	if err := s.acquire(ctx); err != nil {
		return true, err
	}
	defer s.mu.RUnlock()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.guard.check(); err != nil {
		return true, err
	}
	snap := s.kv.snapshot()
	defer snap.release()
	if err := t.checkClaim(snap, b.Partition, b.Epoch); err != nil {
		return true, s.corrupt(err)
	}
	if len(b.Docs) == 0 {
		// A checkpoint alone (a partition's restore ends past its last
		// transaction marker): buffered behind the partition's batches
		// when the load covers it, else written as any batch.
		if !t.cache.bulk.on || !t.cache.bulk.parts[b.Partition] {
			return false, nil
		}
	} else if on, err := t.bulkFor(snap, b.Partition); err != nil || !on {
		return err != nil, s.corrupt(err)
	}
	t.buffer(b)
	return true, s.corrupt(t.afterBuffer())
}

// bulkFor reports whether a replay batch of partition p can take the
// bulk-load path, starting a load when p and the table are empty. The
// caller holds wmu; r is a snapshot taken under it.
func (t *table) bulkFor(r kvReader, p int32) (bool, error) {
	s, tc := t.s, t.cache
	bulk := &tc.bulk
	if bulk.on && bulk.parts[p] {
		return true, nil
	}
	empty, err := t.partitionEmpty(r, p)
	if err != nil || !empty {
		if err == nil {
			err = s.endTableBulk(tc)
		}
		return false, err
	}
	if !bulk.on {
		size, err := t.size(r)
		if err != nil || size != 0 {
			return false, err
		}
		s.tcache.pin(tc) // holds nothing of an empty table; no eviction while the load lasts
		*bulk = tableBulk{on: true, t: t, parts: map[int32]bool{}}
		s.log.Info("docstore table bulk load started", "table", t.spec.Name, "partition", p)
	}
	bulk.parts[p] = true
	return true, nil
}

// buffer takes b's documents and checkpoint onto the bulk-load buffer;
// the ingestion skips what an earlier buffer wrote newer (tableIngestJob.
// entries). The caller holds wmu.
func (t *table) buffer(b engine.DocBatch) {
	bulk := &t.cache.bulk
	if bulk.checkpoints == nil {
		bulk.checkpoints = map[int32]int64{}
	}
	bulk.add(b.Docs)
	bulk.checkpoints[b.Partition] = b.Checkpoint
	t.cache.buffered.Store(true)
	bulk.last = time.Now()
	t.s.holdCompactions(bulk, true)
}

// add buffers docs (kept as they are: see Apply) in order, as the
// reading path writes them: a document replaces its key's buffered one
// only when its version is newer, so that the buffer holds the newest
// version of each key once and a restore with many versions of a key
// writes out one.
func (b *tableBulk) add(docs []engine.Doc) {
	if b.at == nil {
		b.at = map[string]int32{}
	}
	for _, d := range docs {
		if i, ok := b.at[string(d.Key)]; ok {
			if d.Version > b.docs[i].Version {
				b.docs[i] = d
			}
			continue
		}
		b.at[string(d.Key)] = int32(len(b.docs))
		if len(b.docs) == cap(b.docs) {
			b.docs = slices.Grow(b.docs, max(len(b.docs), 1024)) // doubles: append grows a large slice by a quarter, copying it each time
		}
		b.docs = append(b.docs, d)
	}
}

// afterBuffer hands a full buffer to a background ingestion and (re)arms
// the idle timer. The caller holds wmu.
func (t *table) afterBuffer() error {
	s, tc := t.s, t.cache
	if len(tc.bulk.docs) >= s.ingestChunk {
		// Written out in the background while the next chunk buffers; the
		// chunk before it must have landed first (its documents are in
		// the write cache only then).
		if err := s.awaitTableIngest(tc); err != nil {
			return err
		}
		if err := s.startTableIngest(tc); err != nil {
			return err
		}
	}
	idle := cmp.Or(s.tcache.idle, ingestIdle)
	if tc.bulk.timer == nil {
		tc.bulk.timer = time.AfterFunc(idle, func() { s.materializeTableIdle(tc) })
	} else {
		tc.bulk.timer.Reset(idle)
	}
	return nil
}

// materializeTableIdle writes tc's buffer out after a pause in bulk
// batches.
func (s *Store) materializeTableIdle(tc *tableCache) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.materializeTable(tc); err != nil {
		s.log.Warn("docstore table bulk load not written yet; retried before the next operation", "err", err)
	}
	if b := &tc.bulk; b.holding {
		if wait := holdIdle - time.Since(b.last); wait > 0 {
			b.timer.Reset(wait)
		} else {
			s.holdCompactions(b, false)
		}
	}
}

// flushBuffered writes the table's buffer out if it holds anything, for
// an operation about to read the table. The caller holds the shared lock,
// not wmu.
func (t *table) flushBuffered() error {
	if !t.cache.buffered.Load() {
		return nil
	}
	t.s.wmu.Lock()
	defer t.s.wmu.Unlock()
	return t.s.materializeTable(t.cache)
}

// materializeTable writes tc's buffer out (after the ingestion in flight,
// if any) and returns once everything buffered is in the store. On error
// the buffer is kept, to be retried by the next operation. The caller
// holds wmu and the shared lock.
func (s *Store) materializeTable(tc *tableCache) error {
	bulk := &tc.bulk
	if bulk.timer != nil && !bulk.holding {
		bulk.timer.Stop() // a holding load's timer still ends its hold
	}
	if err := s.awaitTableIngest(tc); err != nil {
		return err
	}
	if !bulk.empty() {
		if err := s.startTableIngest(tc); err != nil {
			return err
		}
		if err := s.awaitTableIngest(tc); err != nil {
			return err
		}
	}
	tc.buffered.Store(false)
	return nil
}

// endTableBulk ends tc's bulk load, if one is on, once its buffer is
// written out; the cache is unpinned (shrunk back to its bound). The
// caller holds wmu and the shared lock.
func (s *Store) endTableBulk(tc *tableCache) error {
	if !tc.bulk.on {
		return nil
	}
	if err := s.materializeTable(tc); err != nil {
		return err
	}
	s.log.Info("docstore table bulk load ended", "partitions", len(tc.bulk.parts), "cached_docs", tc.m.len())
	s.holdCompactions(&tc.bulk, false)
	if tc.bulk.timer != nil {
		tc.bulk.timer.Stop() // left armed by materializeTable while the load held
	}
	tc.bulk = tableBulk{}
	s.tcache.unpin(tc, s.cacheMax)
	return nil
}

var _ engine.TableSettler = (*table)(nil)

// Settle writes the table's bulk-load buffer out and ends the load
// (engine.TableSettler): the engine calls it when its warm-ups are about
// to become actives, so that their claims and first flushes do not wait
// for it. A table with no load on returns at once.
func (t *table) Settle(ctx context.Context) error {
	s := t.s
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.corrupt(s.endTableBulk(t.cache))
}

// materializeTables writes every table's buffer out (Close). The caller
// holds wmu and the lock.
func (s *Store) materializeTables() {
	s.tcache.mu.RLock()
	caches := make([]*tableCache, 0, len(s.tcache.byName))
	for _, tc := range s.tcache.byName {
		caches = append(caches, tc)
	}
	s.tcache.mu.RUnlock()
	for _, tc := range caches {
		if err := s.materializeTable(tc); err != nil {
			// Lost with the process: the next start restores those partitions.
			s.log.Warn("docstore table bulk load not written at close; its partitions will be restored again", "err", err)
		}
	}
}

// partitionEmpty reports whether partition p of the table has neither a
// checkpoint nor a document.
func (t *table) partitionEmpty(r kvReader, p int32) (bool, error) {
	if v, err := r.get(t.l.partKey(tabCheckpoint, p)); err != nil || v != nil {
		return false, err
	}
	prefix := t.l.partKey(tabMembers, p)
	found, err := anyKey(r, prefix, prefixUpper(prefix))
	return !found, err
}

// size reads the table's document count from its Clover collection
// metadata.
func (t *table) size(r kvReader) (int, error) {
	raw, err := r.get(t.l.collKey)
	if err != nil {
		return 0, err
	}
	var meta struct{ Size int }
	if err := json.Unmarshal(raw, &meta); err != nil {
		return 0, fmt.Errorf("collection metadata: %w", err)
	}
	return meta.Size, nil
}
