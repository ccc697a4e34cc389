package docstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
)

// Bulk loads are written as sorted files, not through the memtable.
//
// A full restore into an empty store (see bulkLoad) used to go through
// Pebble's write path like any batch: log, memtable, flush, then
// compactions rewriting the same keys at every level. When the engine
// supports ingestion (kvIngester: Pebble), a bulk-load batch is instead
// kept in memory (loadBuffer: the newest version of each movie and the
// partitions' checkpoints), and the buffer is written out as one sorted
// file that Pebble links into its tree in one step (Ingest): each key is
// written once, sorted once, and the document, its rank index entry, its
// members key, the collection size and the checkpoints land together.
//
// The buffer is written out (materialize) before any other operation
// reads or writes the store, in the background when it holds
// defaultIngestChunk movies (while the next batches buffer), when no
// bulk batch has arrived for ingestIdle, and on Close. So every read sees
// every batch Apply accepted, exactly as without the buffer. What changes
// is durability: a bulk batch is durable once the buffer holding it is
// written out, not when Apply returns. A crash before then leaves the
// partition as it was before those batches (no checkpoint, no documents),
// so the next start restores it again; nothing the engine committed to
// Kafka depends on a restore's batches.

// defaultIngestChunk is how many movies the load buffer holds before it
// is handed to a background ingestion (a few hundred bytes each in memory,
// twice while one chunk is ingested and the next one buffers).
const defaultIngestChunk = 250_000

// ingestIdle is how long the load buffer waits for the next bulk batch
// before it is written out (the engine says nothing when a restore ends).
const ingestIdle = 100 * time.Millisecond

// kvEntry is one key of an ingested file: a value to set, or a deletion.
type kvEntry struct {
	key   []byte
	value []byte
	del   bool
}

// kvIngester is the optional ability of a kv engine to add runs of
// entries atomically and durably, newer than everything it holds, without
// going through its write path. Each run is sorted by key, with no key
// twice, and every key of a run is below every key of the next.
type kvIngester interface {
	ingest(runs [][]kvEntry) error
}

// loadBuffer holds the bulk-load batches not yet written out. Guarded by
// Store.wmu.
type loadBuffer struct {
	docs        map[int64]engine.MovieStats
	checkpoints map[int32]int64
	timer       *time.Timer // writes the buffer out after ingestIdle
}

func (b *loadBuffer) empty() bool { return len(b.docs) == 0 && len(b.checkpoints) == 0 }

// applyBulk is Apply's bulk-load path: it buffers b when the store is in
// (or can start) a bulk load and its engine ingests; handled is false when
// b must take the ordinary path.
func (s *Store) applyBulk(ctx context.Context, b engine.Batch) (handled bool, err error) {
	if _, ok := s.kv.(kvIngester); !ok || !b.Replay || s.noIngest || len(b.Docs) == 0 {
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
	return s.bufferBulk(b)
}

// bufferBulk takes a replay batch onto the bulk-load buffer when the store
// is in (or can start) a bulk load and its engine ingests. handled is
// false when the batch must take the ordinary path. The caller holds wmu
// and the shared lock.
func (s *Store) bufferBulk(b engine.Batch) (handled bool, err error) {
	if !s.bulk.on && !s.buf.empty() {
		// A load ended with batches still buffered: write them out before
		// deciding afresh (on the state they leave).
		if err := s.materialize(); err != nil {
			return true, err
		}
	}
	snap := s.kv.snapshot()
	defer snap.release()
	if err := checkClaim(snap, b); err != nil {
		return true, err
	}
	on, err := s.bulkFor(snap, b.Partition, true)
	if err != nil || !on {
		return false, err
	}
	if s.buf.docs == nil {
		s.buf.docs = map[int64]engine.MovieStats{}
		s.buf.checkpoints = map[int32]int64{}
	}
	for _, m := range b.Docs {
		cur, have := s.buf.docs[m.MovieID]
		if !have {
			// Older than what an earlier ingest wrote: a replay skips it.
			// (A movie of the ingest still in flight is not in the cache
			// yet; bulkEntries skips it there.)
			if p, ok := s.priors.get(m.MovieID); ok && m.Version <= p.version {
				continue
			}
		}
		if have && m.Version <= cur.Version {
			continue
		}
		s.buf.docs[m.MovieID] = m
	}
	s.buf.checkpoints[b.Partition] = b.Checkpoint
	s.buffered.Store(true)
	if len(s.buf.docs) >= s.ingestChunk {
		// Written out in the background while the next chunk buffers;
		// the chunk before it must have landed first (its movies are in
		// the write cache only then).
		if err := s.awaitIngest(); err != nil {
			return true, err
		}
		return true, s.startIngest()
	}
	if s.buf.timer == nil {
		s.buf.timer = time.AfterFunc(ingestIdle, s.materializeIdle)
	} else {
		s.buf.timer.Reset(ingestIdle)
	}
	return true, nil
}

// materializeIdle writes the buffer out after a pause in bulk batches.
func (s *Store) materializeIdle() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.materialize(); err != nil {
		s.log.Warn("docstore bulk load not written yet; retried before the next operation", "err", err)
	}
}

// flushBuffered writes the buffer out if it holds anything, for an
// operation about to read the store. The caller holds the shared lock,
// not wmu.
func (s *Store) flushBuffered() error {
	if !s.buffered.Load() {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.materialize()
}

// materialize writes the load buffer out (after the ingestion in flight,
// if any) and returns once everything buffered is in the store. On error
// the buffer is kept, to be retried by the next operation. The caller
// holds wmu and the lock (shared or exclusive).
func (s *Store) materialize() error {
	if s.buf.timer != nil {
		s.buf.timer.Stop()
	}
	if err := s.awaitIngest(); err != nil {
		return err
	}
	if !s.buf.empty() {
		if err := s.startIngest(); err != nil {
			return err
		}
		if err := s.awaitIngest(); err != nil {
			return err
		}
	}
	s.buffered.Store(false)
	return nil
}

// ingestJob is one load buffer being written out in the background.
type ingestJob struct {
	docs        map[int64]engine.MovieStats
	checkpoints map[int32]int64
	done        chan struct{}
	// Set by the job before done is closed:
	written []written
	fresh   int
	err     error
}

// startIngest hands the load buffer to a background ingestion (none may
// be in flight). While it runs, the write cache is only read: every path
// that changes it (writes, drops, resets, warm, the next ingestion) awaits
// the job first, under wmu. The caller holds wmu.
func (s *Store) startIngest() error {
	if err := s.guard.check(); err != nil {
		return err
	}
	job := &ingestJob{docs: s.buf.docs, checkpoints: s.buf.checkpoints, done: make(chan struct{})}
	s.buf.docs, s.buf.checkpoints = nil, nil
	s.job = job
	s.priors.begin() // ended by awaitIngest
	go func() {
		defer close(job.done)
		job.err = s.runIngest(job)
	}()
	return nil
}

// runIngest writes job's documents and checkpoints out as ingested tables.
func (s *Store) runIngest(job *ingestJob) error {
	start := time.Now()
	snap := s.kv.snapshot()
	meta, err := snap.get(collectionKey)
	if err == nil {
		meta = slices.Clone(meta)
	}
	snap.release()
	if err != nil {
		return err
	}
	runs, done, fresh, err := s.bulkEntries(job.docs, job.checkpoints, meta)
	if err != nil {
		return err
	}
	if err := s.kv.(kvIngester).ingest(runs); err != nil {
		return fmt.Errorf("ingest bulk load (%d movies): %w", len(job.docs), err)
	}
	job.written, job.fresh = done, fresh
	s.counts.ingests.Add(1)
	s.log.Info("docstore bulk load written", "movies", len(job.docs), "fresh", fresh,
		"partitions", len(job.checkpoints), "took", time.Since(start))
	return nil
}

// awaitIngest waits for the ingestion in flight, if any, and records what
// it wrote in the write cache. If it failed, its documents and checkpoints
// go back into the load buffer (under what was buffered since, which is
// newer) and its error is returned. The caller holds wmu.
func (s *Store) awaitIngest() error {
	job := s.job
	if job == nil {
		return nil
	}
	<-job.done
	s.job = nil
	defer s.priors.end() // begun by startIngest
	if job.err != nil {
		if s.buf.docs == nil {
			s.buf.docs = map[int64]engine.MovieStats{}
			s.buf.checkpoints = map[int32]int64{}
		}
		for id, m := range job.docs {
			if cur, ok := s.buf.docs[id]; !ok || cur.Version < m.Version {
				s.buf.docs[id] = m
			}
		}
		for p, cp := range job.checkpoints {
			if _, ok := s.buf.checkpoints[p]; !ok {
				s.buf.checkpoints[p] = cp
			}
		}
		return job.err
	}
	for _, e := range job.written {
		s.priors.put(e.id, e.p)
	}
	return nil
}

// written is a movie's state after a write, for the write cache.
type written struct {
	id int64
	p  prior
}

// bulkEntries turns the load buffer into the keys of its ingestion, as
// runs of sorted keys (one run per key family: members, documents, rank
// entries, checkpoints and the collection size) in key order, no key
// twice. Each family is sorted by its numbers rather than its bytes (the
// keys share long prefixes, and one byte-wise sort of every key was a
// third of a restore's CPU). It returns the state of every movie written
// and how many are new.
func (s *Store) bulkEntries(buf map[int64]engine.MovieStats, checkpoints map[int32]int64, meta []byte) (runs [][]kvEntry, out []written, fresh int, err error) {
	type rankItem struct {
		id  int64
		avg float64
		del bool
	}
	type memberItem struct {
		p   int32
		id  int64
		del bool
	}
	ids := slices.Sorted(maps.Keys(buf))
	n := len(ids)
	docs := make([]kvEntry, 0, n)
	ranks := make([]rankItem, 0, n+n/4)
	members := make([]memberItem, 0, n+n/8)
	out = make([]written, 0, n)
	enc := newDocEncoder()
	for _, id := range ids { // movie id order is document key order
		m := buf[id]
		old, exists := s.priors.get(id) // in a bulk load, a movie the cache does not know is new
		if exists && m.Version <= old.version {
			continue // an older version replayed while the newer one was being ingested
		}
		avg := m.Avg()
		if exists {
			if moviedoc.RankKey(old.avg(), id) != moviedoc.RankKey(avg, id) {
				ranks = append(ranks, rankItem{id: id, avg: old.avg(), del: true})
			}
			if old.part != m.Partition {
				members = append(members, memberItem{p: old.part, id: id, del: true})
			}
		} else {
			fresh++
		}
		data, err := enc.encode(m)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("encode movie %d: %w", id, err)
		}
		docs = append(docs, kvEntry{key: nsKey(nsClover, docKey(id)), value: slices.Clone(data)})
		ranks = append(ranks, rankItem{id: id, avg: avg})
		if !exists || old.part != m.Partition {
			members = append(members, memberItem{p: m.Partition, id: id})
		}
		out = append(out, written{id, priorOf(m)})
	}
	// Rank entries sort by average descending, then movie id (rankKey).
	slices.SortFunc(ranks, func(a, b rankItem) int {
		return cmp.Or(cmp.Compare(^moviedoc.OrderedFloat(a.avg), ^moviedoc.OrderedFloat(b.avg)),
			cmp.Compare(uint64(a.id)^signBit, uint64(b.id)^signBit))
	})
	rankRun := make([]kvEntry, len(ranks))
	for i, r := range ranks {
		rankRun[i] = kvEntry{key: rankEntry([]byte{nsClover}, r.avg, r.id), value: []byte{}, del: r.del}
	}
	// Members keys sort by partition, then movie id (memberKey).
	slices.SortFunc(members, func(a, b memberItem) int {
		return cmp.Or(cmp.Compare(uint32(a.p), uint32(b.p)), cmp.Compare(uint64(a.id)^signBit, uint64(b.id)^signBit))
	})
	memberRun := make([]kvEntry, len(members))
	for i, m := range members {
		memberRun[i] = kvEntry{key: memberKey(m.p, m.id), del: m.del}
		if !m.del {
			memberRun[i].value = memberMark
		}
	}
	var small []kvEntry
	for _, p := range slices.Sorted(maps.Keys(checkpoints)) {
		small = append(small, kvEntry{key: partitionKey(nsCheckpoints, p), value: int64Value(checkpoints[p])})
	}
	runs = [][]kvEntry{small, memberRun, docs, rankRun}
	if fresh > 0 {
		sized, err := withSize(meta, fresh)
		if err != nil {
			return nil, nil, 0, err
		}
		runs = append(runs, []kvEntry{{key: slices.Clone(collectionKey), value: sized}})
	}
	runs = slices.DeleteFunc(runs, func(r []kvEntry) bool { return len(r) == 0 })
	// Each family is one key range of its own (distinct prefixes): order
	// the runs by their first keys and check that none overlaps the next.
	slices.SortFunc(runs, func(a, b []kvEntry) int { return bytes.Compare(a[0].key, b[0].key) })
	for i := 1; i < len(runs); i++ {
		if prev := runs[i-1]; bytes.Compare(prev[len(prev)-1].key, runs[i][0].key) >= 0 {
			return nil, nil, 0, fmt.Errorf("bulk load: key runs overlap at %q", runs[i][0].key)
		}
	}
	return runs, out, fresh, nil
}

// withSize returns Clover's collection metadata meta with n more
// documents in its size.
func withSize(meta []byte, n int) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(meta, &fields); err != nil {
		return nil, fmt.Errorf("collection metadata: %w", err)
	}
	var size int
	if err := json.Unmarshal(fields["Size"], &size); err != nil {
		return nil, fmt.Errorf("collection size: %w", err)
	}
	fields["Size"], _ = json.Marshal(size + n)
	return json.Marshal(fields)
}
