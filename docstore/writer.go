package docstore

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
)

// collectionKey is Clover's metadata key of the movies collection
// (getCollectionKey): JSON with its size and indexes.
var collectionKey = nsKey(nsClover, []byte("coll:"+collection))

// prior is what a write needs to know about the stored version of a movie:
// its version (for the version rule), its partition (members key) and its
// average (its rank index entry, removed when it changes).
type prior struct {
	version int64
	avg     float64
	part    int32
	absent  bool // the store holds no such movie (learned by Load)
}

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
	return prior{version: m.Version, avg: m.Avg(), part: m.Partition}, true, nil
}

// put writes m over old (exists false: a new movie). It never reads.
func (w *docWriter) put(m engine.MovieStats, old prior, exists bool) error {
	avg := m.Avg()
	// The rank entry changes only with the average, the members key only
	// with the partition: an update of a movie that stays in its partition
	// writes two keys (document and rank entry) and one tombstone. Every
	// key written costs compaction CPU later, per key more than per byte.
	rank := !exists || moviedoc.OrderedFloat(old.avg) != moviedoc.OrderedFloat(avg)
	member := !exists || old.part != m.Partition
	if exists {
		if rank {
			w.scratch = rankEntry(append(w.scratch[:0], nsClover), old.avg, m.MovieID)
			if err := w.b.del(w.scratch); err != nil {
				return fmt.Errorf("remove rank entry of movie %d: %w", m.MovieID, err)
			}
		}
		if member {
			if err := w.b.del(memberKey(old.part, m.MovieID)); err != nil {
				return err
			}
		}
	} else {
		w.fresh++
	}
	if rank {
		w.scratch = rankEntry(append(w.scratch[:0], nsClover), avg, m.MovieID)
		if err := w.b.set(w.scratch, nil); err != nil {
			return fmt.Errorf("add rank entry of movie %d: %w", m.MovieID, err)
		}
	}
	data, err := w.enc.encode(m)
	if err != nil {
		return fmt.Errorf("encode movie %d: %w", m.MovieID, err)
	}
	w.scratch = append(append(append(w.scratch[:0], nsClover), docKeyPrefix...), moviedoc.DocID(m.MovieID)...)
	if err := w.b.set(w.scratch, data); err != nil {
		return err
	}
	if !member {
		return nil
	}
	return w.b.set(memberKey(m.Partition, m.MovieID), memberMark)
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
			cur, have, changed, last = prior{version: m.Version, avg: m.Avg(), part: m.Partition}, true, true, m
		}
		if changed {
			if err := w.put(last, old, exists); err != nil {
				return err
			}
			written(last.MovieID, cur)
		}
		i = j
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
