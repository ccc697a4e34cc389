package docstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// tableBulk is the state of a table's bulk load: a restore into an empty
// table. It starts with the first replay batch into an empty partition of
// a table without documents, and covers every partition that starts the
// same way while it lasts. Meanwhile the table's write cache is pinned and
// holds every document the load wrote, so a key it does not know is new:
// the batches read nothing. They are buffered (documents not copied, see
// table.Apply; the newest version of each key once) and written out as
// sorted files that Pebble ingests (table_ingest.go): before anything else
// reads or writes the table, in the background every Store.ingestChunk
// documents, after ingestIdle without a batch, and on Close. So every read
// sees every batch Apply accepted, but a bulk batch is durable only once
// written out: a crash before leaves the partition as of the last buffer
// written (or empty), and the next start restores the rest again.
//
// A full cache does not end the load: keys it cannot hold are remembered
// approximately (seenKeys), and only a key that may have been written
// before is read. Any other write of the table's documents (not a
// checkpoint alone, which ends a partition's restore) ends the load. It
// runs only on an engine that ingests (kvIngester). Guarded by Store.wmu.
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
	// overflow: the full cache refused a document the load wrote, so a key
	// it does not hold is read when seen (every key written out) may hold it.
	overflow bool
	seen     seenKeys
	// holding: the load holds compactions back (kvIngester.holdCompactions)
	// until it ends or no batch has come for holdIdle since last.
	holding bool
	last    time.Time
}

// holdIdle is how long a bulk load goes without batches before it lets
// compactions run again (short pauses in a restore's fetches do not).
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
// (or can start) a bulk load; handled is false when b takes the ordinary
// path.
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
		// A checkpoint alone: buffered when the load covers its partition.
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

// buffer takes b's documents and checkpoint onto the bulk-load buffer.
// The caller holds wmu.
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

// add buffers docs (not copied: see Apply) in order: a document replaces
// its key's buffered one only when its version is newer, as the reading
// path would, so that the buffer holds each key's newest version once.
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
		// The chunk before must have landed first (its documents are in the
		// write cache only then).
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

// materializeTableIdle writes tc's buffer out after a pause in batches.
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

// flushBuffered writes the table's buffer out, if any, before a read. The
// caller holds the shared lock, not wmu.
func (t *table) flushBuffered() error {
	if !t.cache.buffered.Load() {
		return nil
	}
	t.s.wmu.Lock()
	defer t.s.wmu.Unlock()
	return t.s.materializeTable(t.cache)
}

// materializeTable writes tc's buffer out and returns once everything
// buffered is in the store; on error the buffer is kept for the next
// operation. The caller holds wmu and the shared lock.
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

// endTableBulk ends tc's bulk load, if on, once its buffer is written
// out, and unpins the cache. The caller holds wmu and the shared lock.
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
// (engine.TableSettler), so that claims and first flushes of warm-ups
// becoming actives do not wait for it.
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
	caches := slices.Collect(maps.Values(s.tcache.byName))
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
