package docstore

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
	"github.com/ostafen/clover/v2"
	d "github.com/ostafen/clover/v2/document"
)

// Store is the Clover store of keepstate. All methods are safe for
// concurrent use (except Close); writes are serialized and readers see
// only committed batches, each from one snapshot.
type Store struct {
	dir    string
	kv     kv
	lock   *dirLock
	sync   bool
	noBulk bool // withoutBulkLoad
	// noIngest makes bulk loads go through write batches (withoutIngest).
	noIngest bool
	guard    diskGuard
	log      *slog.Logger
	counts   *readCounts

	// mu guards kv against Close: every operation holds it shared.
	mu     sync.RWMutex
	closed atomic.Bool

	// wmu serializes writes (and guards bulk, priors and gen).
	wmu  sync.Mutex
	bulk bulkLoad
	buf  loadBuffer // bulk-load batches not written out yet (ingest.go)
	job  *ingestJob // the load buffer being ingested in the background, or nil
	// ingestChunk is the load buffer's size that starts an ingestion.
	ingestChunk int
	priors      *priorCache
	tcache      tableCaches // the tables' write cache (table_cache.go)
	gen         uint64      // counts drops and resets (they make warm's snapshot stale)
	// learnt holds the write-cache updates of Loads that found wmu held
	// (underWriteLock), run by the write that held it;
	// lmu guards it.
	lmu    sync.Mutex
	learnt []func()

	// condemned is the error every call fails with once the store met
	// corruption (corrupt.go); nil while it is sound.
	condemned   atomic.Pointer[error]
	condemnedCh chan struct{} // closed when condemned is set

	buffered atomic.Bool   // buf holds something: readers write it out first
	stopping atomic.Bool   // Close has begun: warm stops
	warmed   chan struct{} // closed when warm has returned

}

var (
	_ engine.Store            = (*Store)(nil)
	_ engine.PartitionScanner = (*Store)(nil)
	_ engine.Resetter         = (*Store)(nil)
)

// Dir returns the data directory of the store.
func (s *Store) Dir() string { return s.dir }

// acquire takes the shared lock, or fails with ErrUnavailable once the
// store is closed, and with ErrCorrupt once it is condemned. The caller
// must call s.mu.RUnlock when it returns nil.
func (s *Store) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed.Load() {
		s.mu.RUnlock()
		return fmt.Errorf("docstore %s closed: %w", s.dir, engine.ErrUnavailable)
	}
	if err := s.CondemnedErr(); err != nil {
		s.mu.RUnlock()
		return err
	}
	return nil
}

// view runs fn on one snapshot, with a Clover handle reading it.
func (s *Store) view(ctx context.Context, fn func(r kvReader, db *clover.DB) error) error {
	return s.read(ctx, func(r kvReader) error {
		db, err := clover.OpenWithStore(&cloverStore{r: r, counts: s.counts})
		if err != nil {
			return err
		}
		return fn(r, db)
	})
}

// read runs fn on one snapshot of the committed state (a buffered bulk
// load is written out first, so fn sees every batch Apply accepted).
func (s *Store) read(ctx context.Context, fn func(r kvReader) error) error {
	return s.readSeq(ctx, func(r kvReader, _ uint64) error { return fn(r) })
}

// readSeq is read that also passes fn the write cache's sequence number
// read just before the snapshot (priorCache.seqNow).
func (s *Store) readSeq(ctx context.Context, fn func(r kvReader, seq uint64) error) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := s.flushBuffered(); err != nil {
		return err
	}
	seq := s.priors.seqNow()
	snap := s.kv.snapshot()
	defer snap.release()
	return s.corrupt(fn(snap, seq))
}

// update runs fn with one write batch and commits it (synced unless fsync
// is off) when fn returns nil; the batch is discarded otherwise. after,
// when fn returns one, runs once the batch is committed. Writes are
// serialized.
func (s *Store) update(ctx context.Context, fn func(b kvBatch) (after func(), err error)) error {
	return s.write(ctx, false, 0, fn)
}

// write is update with a choice of batch: blind (kv.writeBatch, of size
// bytes expected) reads only the committed state, for fn that never reads
// what it wrote.
func (s *Store) write(ctx context.Context, blind bool, size int, fn func(b kvBatch) (after func(), err error)) error {
	return s.corrupt(s.writeLocked(ctx, blind, size, fn))
}

// writeLocked is write without the corruption check.
func (s *Store) writeLocked(ctx context.Context, blind bool, size int, fn func(b kvBatch) (after func(), err error)) error {
	// Lock order, everywhere: the shared lock, then wmu.
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	defer s.drainLearnt() // under wmu, after the batch and its after (Store.learn)
	if err := s.guard.check(); err != nil {
		return err
	}
	if err := s.materialize(); err != nil { // the buffered bulk load goes first
		return err
	}
	var b kvBatch
	if blind {
		b = s.kv.writeBatch(size)
	} else {
		b = s.kv.batch()
	}
	defer b.release()
	after, err := fn(b)
	if err != nil {
		return err
	}
	s.priors.begin() // Loads read the store only until the cache has the batch
	defer s.priors.end()
	if err := b.commit(s.sync); err != nil {
		s.priors.clear() // the batch may have been written after all
		return fmt.Errorf("commit: %w", err)
	}
	if after != nil {
		after()
	}
	return nil
}

// Claim makes the caller the writer of partition p and returns its new
// epoch, one more than the last epoch claimed for p (the first is 1).
func (s *Store) Claim(ctx context.Context, p int32) (int64, error) {
	var epoch int64
	err := s.update(ctx, func(b kvBatch) (func(), error) {
		last, _, err := getInt64(b, partitionKey(nsEpochs, p))
		if err != nil {
			return nil, err
		}
		epoch = last + 1
		return nil, b.set(partitionKey(nsEpochs, p), int64Value(epoch))
	})
	if err != nil {
		return 0, fmt.Errorf("claim partition %d: %w", p, err)
	}
	return epoch, nil
}

// Checkpoint returns the next changelog offset to read for partition p; ok
// is false when the store holds no checkpoint for p.
func (s *Store) Checkpoint(ctx context.Context, p int32) (next int64, ok bool, err error) {
	err = s.read(ctx, func(r kvReader) error {
		next, ok, err = getInt64(r, partitionKey(nsCheckpoints, p))
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("checkpoint of partition %d: %w", p, err)
	}
	return next, ok, nil
}

// Get returns the aggregate of one movie by its _id (one key lookup of
// its Clover document, no scan), or ErrNotFound.
func (s *Store) Get(ctx context.Context, movieID int64) (engine.MovieStats, error) {
	var m engine.MovieStats
	err := s.read(ctx, func(r kvReader) error {
		var err error
		var ok bool
		m, ok, err = s.find(r, movieID)
		if err == nil && !ok {
			err = engine.ErrNotFound
		}
		return err
	})
	if err != nil {
		return engine.MovieStats{}, fmt.Errorf("get movie %d: %w", movieID, err)
	}
	return m, nil
}

// find reads a movie's Clover document by its key and decodes it with
// Clover's decoder. It is what Clover's FindById does, without its check
// that the collection exists (the store creates it with the store) and
// without opening a Clover handle per call: a key lookup is the hot read
// of the engine (Load) and of the API.
func (s *Store) find(r kvReader, movieID int64) (engine.MovieStats, bool, error) {
	s.counts.docGets.Add(1)
	v, err := r.get(nsKey(nsClover, docKey(movieID)))
	if err != nil || v == nil {
		return engine.MovieStats{}, false, err
	}
	m, err := decodeDoc(v)
	if err != nil {
		return engine.MovieStats{}, false, fmt.Errorf("decode movie %d: %w", movieID, err)
	}
	return m, true, nil
}

// decodeDoc decodes a stored movie document: the fast path (decodeMovie)
// for the layout this store writes, Clover's decoder for anything else.
func decodeDoc(v []byte) (engine.MovieStats, error) {
	if m, ok := decodeMovie(v); ok {
		return m, nil
	}
	doc, err := d.Decode(v)
	if err != nil {
		return engine.MovieStats{}, err
	}
	return moviedoc.FromDocument(doc)
}

// Load returns the stored documents for ids; ids without a document are
// absent from the map. The write cache answers for the movies it holds
// (priorCache.serve: their committed state); the others are read from one
// snapshot, a batch of at least seekLoadMin ids with one iterator seeking
// the keys in order (see loadSorted), fewer with point reads.
func (s *Store) Load(ctx context.Context, ids []int64) (map[int64]engine.MovieStats, error) {
	before := s.priors.removals.count() // before the snapshot (Store.learn)
	out := make(map[int64]engine.MovieStats, len(ids))
	var read []int64
	err := s.readSeq(ctx, func(r kvReader, seq uint64) error {
		read = s.priors.serve(seq, ids, out)
		switch {
		case len(read) >= seekLoadMin:
			return s.loadSorted(r, read, out)
		case len(read) > 0:
			return s.loadPoints(r, read, out)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load %d movies: %w", len(ids), err)
	}
	s.learn(before, read, out)
	return out, nil
}

// learn adds what a Load read (found, by id; absent when missing) to the
// prior cache, so that the Apply that writes those movies next reads
// nothing: the engine loads the movies its cache dropped, then writes
// them. before is the cache's removal count read before the Load's
// snapshot; priorCache.learn says why that makes the read safe to keep.
// It never waits for wmu (underWriteLock).
func (s *Store) learn(before uint64, ids []int64, found map[int64]engine.MovieStats) {
	if s.priors.max == 0 {
		return
	}
	entries := make([]written, 0, len(ids))
	for _, id := range ids {
		if m, ok := found[id]; ok {
			entries = append(entries, written{id, priorOf(m)})
		} else {
			entries = append(entries, written{id, prior{absent: true}})
		}
	}
	s.underWriteLock(func() { s.learnNow(before, entries) })
}

// maxLearnt bounds the Loads waiting in Store.learnt.
const maxLearnt = 64

// underWriteLock runs learn (what a Load read, for a write cache) under
// wmu without waiting for it: at once when wmu is free, else queued in
// s.learnt for the write holding it to run as it ends (drainLearnt). A
// full queue drops learn: the cache only misses what it would have saved.
func (s *Store) underWriteLock(learn func()) {
	if s.wmu.TryLock() {
		learn()
		s.drainLearnt()
		s.wmu.Unlock()
		return
	}
	s.lmu.Lock()
	if len(s.learnt) < maxLearnt {
		s.learnt = append(s.learnt, learn)
	}
	s.lmu.Unlock()
}

// learnNow adds entries to the prior cache unless a bulk load or an
// ingestion is in flight (they write outside the cache's view until they
// end). The caller holds wmu.
func (s *Store) learnNow(before uint64, entries []written) {
	if s.bulk.on || s.job != nil || s.buffered.Load() {
		return
	}
	s.priors.learn(before, entries)
}

// drainLearnt runs the Loads' updates waiting in s.learnt (movies' and
// tables'). The caller holds wmu.
func (s *Store) drainLearnt() {
	s.lmu.Lock()
	waiting := s.learnt
	s.learnt = nil
	s.lmu.Unlock()
	for _, learn := range waiting {
		learn()
	}
}

// loadPoints reads the documents of ids into out with one point read each.
func (s *Store) loadPoints(r kvReader, ids []int64, out map[int64]engine.MovieStats) error {
	for _, id := range ids {
		m, ok, err := s.find(r, id)
		if err != nil {
			return err
		}
		if ok {
			out[id] = m
		}
	}
	return nil
}

// seekLoadMin is the smallest Load read with one iterator.
const seekLoadMin = 16

// loadSorted reads the documents of ids into out with one iterator over
// the snapshot, seeking their keys in ascending order. A point read builds
// an iterator over every level of the LSM for each key; one iterator
// seeking forward reuses its position (Pebble turns a seek past the
// current key into steps where it can), which halved the cost of the
// aggregate stage's reads of documents its cache had dropped. Each seek is
// a prefix seek (seekExact): files whose bloom filter rules the key out
// are skipped, so a random read of a deep store (1M movies over several
// levels) positions one file instead of one per level (uniform 1M-movie
// run, three pairs: ratings/s +2 to +14 %, CPU 0 to -11 %;
// docs/benchmarks.md).
func (s *Store) loadSorted(r kvReader, ids []int64, out map[int64]engine.MovieStats) (err error) {
	type entry struct {
		id  int64
		key []byte
	}
	keys := make([]entry, len(ids))
	for i, id := range ids {
		keys[i] = entry{id, nsKey(nsClover, docKey(id))}
	}
	slices.SortFunc(keys, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
	upper := append(slices.Clip(keys[len(keys)-1].key), 0)
	it, err := r.iter(keys[0].key, upper, false)
	if err != nil {
		return err
	}
	defer closeInto(it, &err)
	for i, k := range keys {
		if i > 0 && bytes.Equal(k.key, keys[i-1].key) {
			continue // an id asked for twice
		}
		s.counts.docGets.Add(1)
		if !seekExact(it, k.key) {
			continue
		}
		m, err := decodeDoc(it.value())
		if err != nil {
			return fmt.Errorf("decode movie %d: %w", k.id, err)
		}
		out[k.id] = m
	}
	return nil
}

// checkClaim returns ErrFenced unless b.Epoch is the current claim of
// b.Partition in r.
func checkClaim(r kvReader, b engine.Batch) error {
	claimed, ok, err := getInt64(r, partitionKey(nsEpochs, b.Partition))
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: epoch %d, but the partition has no claim (store reset or lost?)", engine.ErrFenced, b.Epoch)
	case b.Epoch != claimed:
		return fmt.Errorf("%w: epoch %d, partition claimed with epoch %d", engine.ErrFenced, b.Epoch, claimed)
	}
	return nil
}

// movieBatchBytes is about what one movie adds to an Apply batch: the
// document (about 220 bytes with three sources), its key, the old rank
// entry's deletion and the new one (about 95 bytes each), a new movie's
// members entry, and the batch's record headers. Sizing the batch up front spares
// Pebble the copies of a buffer that doubles as it grows (at 10,000
// movies, 15 MB allocated for a 5 MB batch).
const movieBatchBytes = 512

// Apply writes b as one synced batch: every document (in Clover's format,
// rank index entry included) and the partition checkpoint, or nothing.
// b.Epoch must be the partition's current claim (else ErrFenced); see
// engine.Store for the version rules. It reads only the documents the
// prior cache does not know, and none on the bulk-load path (a replay into
// an empty store, bulkLoad).
func (s *Store) Apply(ctx context.Context, b engine.Batch) error {
	for _, m := range b.Docs {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("apply partition %d: %w", b.Partition, err)
		}
	}
	if handled, err := s.applyBulk(ctx, b); handled {
		if err != nil {
			return fmt.Errorf("apply partition %d (%d docs): %w", b.Partition, len(b.Docs), err)
		}
		return nil
	}
	// A blind batch: every key is read (epoch, checkpoint, members, each
	// movie once, the collection size) before the batch writes it.
	err := s.write(ctx, true, len(b.Docs)*movieBatchBytes, func(kb kvBatch) (func(), error) {
		if err := checkClaim(kb, b); err != nil {
			return nil, err
		}
		w := newDocWriter(kb, s.counts)
		bulk := false
		if len(b.Docs) > 0 {
			var err error
			if bulk, err = s.bulkFor(kb, b.Partition, b.Replay); err != nil {
				return nil, err
			}
		}
		// What the batch learns (reads) and leaves (writes) goes into the
		// prior cache once it has committed, in that order.
		learned := make([]written, 0, len(b.Docs))
		known := func(id int64) (prior, bool, error) {
			if p, exists, cached := s.priors.lookup(id); cached {
				return p, exists, nil
			}
			if bulk { // everything in the store is cached: id is new
				return prior{}, false, nil
			}
			p, ok, err := w.stored(id)
			if ok && err == nil {
				learned = append(learned, written{id, p})
			}
			return p, ok, err
		}
		wrote := func(id int64, p prior) { learned = append(learned, written{id, p}) }
		after := func() {
			for _, e := range learned {
				s.priors.put(e.id, e.p)
			}
		}
		if err := writeDocs(w, b.Docs, b.Replay, known, wrote); err != nil {
			return nil, err
		}
		return after, kb.set(partitionKey(nsCheckpoints, b.Partition), int64Value(b.Checkpoint))
	})
	if err != nil {
		return fmt.Errorf("apply partition %d (%d docs): %w", b.Partition, len(b.Docs), err)
	}
	return nil
}
