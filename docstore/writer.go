package docstore

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
)

// collectionKey is Clover's metadata key of the movies collection
// (getCollectionKey): JSON with its size and indexes.
var collectionKey = nsKey(nsClover, []byte("coll:"+collection))

// docWriter writes one batch's documents in Clover's format: the document
// under Clover's document key (docEncoder), the rank index entry
// (rankEntry), the collection size in Clover's metadata, and the members
// key of the store (written when a movie is new or moves partition). It does what clover.DB.UpdateById and Insert do, with
// their per-call overhead (metadata JSON, index handles, fmt and
// reflection per value) hoisted out of the loop; the read side stays
// Clover's (FindById, the query planner on the rank index). A docWriter is bound to its batch
// and used by one goroutine.
type docWriter struct {
	b       kvBatch
	counts  *readCounts
	enc     *docEncoder
	fresh   int    // documents added to the collection
	scratch []byte // key buffer (batches copy what they are given)
	// index holds the batch's rank entries and members keys until
	// writeIndex writes them in key order, after the documents.
	index *indexOps
}

func newDocWriter(b kvBatch, counts *readCounts) *docWriter {
	return &docWriter{b: b, counts: counts, enc: newDocEncoder()}
}

// stored reads the stored version of movie from the batch's view; ok is
// false when the movie has no document.
func (w *docWriter) stored(movie int64) (prior, bool, error) {
	w.counts.writeReads.Add(1)
	v, err := w.b.get(nsKey(nsClover, docKey(movie)))
	if err != nil || v == nil {
		return prior{}, false, err
	}
	m, err := decodeDoc(v)
	if err != nil {
		return prior{}, true, fmt.Errorf("decode movie %d: %w", movie, err)
	}
	return priorOf(m), true, nil
}

// put writes m over old (exists false: a new movie). It never reads. Its
// rank entry and members key changes wait in w.index for writeIndex.
func (w *docWriter) put(m engine.MovieStats, old prior, exists bool) error {
	avg := m.Avg()
	// The rank entry changes only with the average, the members key only
	// with the partition: an update of a movie that stays in its partition
	// writes two keys (document and rank entry) and one tombstone. Every
	// key written costs compaction CPU later, per key more than per byte.
	rank := !exists || moviedoc.OrderedFloat(old.avg()) != moviedoc.OrderedFloat(avg)
	member := !exists || old.part != m.Partition
	if exists {
		if rank {
			w.scratch = rankEntry(append(w.scratch[:0], nsClover), old.avg(), m.MovieID)
			w.addIndex(w.scratch, true)
		}
		if member {
			w.addIndex(memberKey(old.part, m.MovieID), true)
		}
	} else {
		w.fresh++
	}
	if rank {
		w.scratch = rankEntry(append(w.scratch[:0], nsClover), avg, m.MovieID)
		w.addIndex(w.scratch, false)
	}
	if member {
		w.addIndex(memberKey(m.Partition, m.MovieID), false)
	}
	data, err := w.enc.encode(m)
	if err != nil {
		return fmt.Errorf("encode movie %d: %w", m.MovieID, err)
	}
	w.scratch = moviedoc.AppendDocID(append(append(w.scratch[:0], nsClover), docKeyPrefix...), m.MovieID)
	return w.b.set(w.scratch, data)
}

// indexOps gathers a batch's index key writes (sets of empty values and
// deletions) to write them in key order. No key is written twice in a
// batch: every key names one movie, and put runs once per movie. Its
// buffers come from indexOpsPool and go back to it after write: a batch
// of 2048 movies gathers about 400 KB of keys.
type indexOps struct {
	buf []byte // the keys, back to back
	ops []indexOp
}

type indexOp struct {
	start, end int
	del        bool
}

var indexOpsPool = sync.Pool{New: func() any { return new(indexOps) }}

// addIndex records a write of key (copied): a deletion when del is set, else
// a set of memberMark (the empty value of rank entries and members keys).
func (w *docWriter) addIndex(key []byte, del bool) {
	if w.index == nil {
		w.index = indexOpsPool.Get().(*indexOps)
	}
	x := w.index
	start := len(x.buf)
	x.buf = append(x.buf, key...)
	x.ops = append(x.ops, indexOp{start: start, end: len(x.buf), del: del})
}

// writeIndex writes the index keys that put gathered into the batch, in
// key order, and returns the buffers to the pool (the batch copies what
// it is given). A batch's documents arrive in key order already
// (writeDocs sorts by movie); writing the index keys sorted too, rather
// than interleaved with them, lets the memtable's skiplist start each
// insert from the last one's position instead of from its top.
func (w *docWriter) writeIndex() error {
	x := w.index
	if x == nil {
		return nil
	}
	w.index = nil
	defer func() {
		x.buf, x.ops = x.buf[:0], x.ops[:0]
		indexOpsPool.Put(x)
	}()
	key := func(o indexOp) []byte { return x.buf[o.start:o.end] }
	slices.SortFunc(x.ops, func(a, c indexOp) int { return bytes.Compare(key(a), key(c)) })
	for _, o := range x.ops {
		var err error
		if o.del {
			err = w.b.del(key(o))
		} else {
			err = w.b.set(key(o), memberMark)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// addSize adds n to the collection size in Clover's metadata.
func addSize(b kvBatch, n int) error {
	if n == 0 {
		return nil
	}
	raw, err := b.get(collectionKey)
	if err != nil {
		return err
	}
	out, err := withSize(raw, n)
	if err != nil {
		return err
	}
	return b.set(collectionKey, out)
}

// lookup returns what the batch knows about a movie before writing it.
type lookup func(movie int64) (prior, bool, error)

// writeDocs writes docs in order, as if one by one: a document whose
// version is not newer than the stored one (or than an earlier document of
// the same batch) is skipped when replay is set, and refuses the batch
// with ErrFenced otherwise. known tells the stored version of a movie
// (a read, or the bulk load's memory); written receives the final state
// of every movie written.
func writeDocs(w *docWriter, docs []engine.MovieStats, replay bool, known lookup, written func(int64, prior)) error {
	// Movie id order (stable: a movie's documents keep their order), so a
	// movie's documents are adjacent and writes arrive in key order.
	docs = slices.Clone(docs)
	slices.SortStableFunc(docs, func(a, b engine.MovieStats) int { return cmp.Compare(a.MovieID, b.MovieID) })
	for i := 0; i < len(docs); {
		j := i + 1
		for j < len(docs) && docs[j].MovieID == docs[i].MovieID {
			j++
		}
		old, exists, err := known(docs[i].MovieID)
		if err != nil {
			return err
		}
		cur, have, changed := old, exists, false
		var last engine.MovieStats
		for _, m := range docs[i:j] {
			if have && m.Version <= cur.version {
				if err := stale(m, cur.version, replay); err != nil {
					return err
				}
				continue
			}
			cur, have, changed, last = priorOf(m), true, true, m
		}
		if changed {
			if err := w.put(last, old, exists); err != nil {
				return err
			}
			written(last.MovieID, cur)
		}
		i = j
	}
	if err := w.writeIndex(); err != nil {
		return err
	}
	return addSize(w.b, w.fresh)
}

// stale returns ErrFenced for a document that is not newer than the stored
// version, or nil (skip it) during a replay.
func stale(m engine.MovieStats, stored int64, replay bool) error {
	if replay {
		return nil
	}
	return fmt.Errorf("%w: movie %d version %d is not newer than the stored version %d",
		engine.ErrFenced, m.MovieID, m.Version, stored)
}
