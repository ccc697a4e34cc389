package boltstore

import (
	"fmt"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
	"github.com/ostafen/clover/v2"
	d "github.com/ostafen/clover/v2/document"
	"github.com/ostafen/clover/v2/index"
	"go.etcd.io/bbolt"
)

// docWriter replaces stored documents inside one read-write bbolt
// transaction. It does what clover.DB.UpdateById does, with the same
// Clover packages (document encoding and validation, index keys), but
// with the per-call overhead hoisted out of the loop: UpdateById decodes
// the collection metadata (JSON) and builds its index handles on every
// call, and looks the document up twice per movie together with our
// existence check. docWriter reads the index list once per batch and the
// document once per movie.
//
// The only on-disk detail it relies on beyond Clover's public API is the
// document key (docKey, Clover's getDocumentKey), which the store already
// used for its existence check; TestWriterMatchesUpdateByID pins the
// result to what UpdateById writes with Clover v2.0.0-alpha.3.
//
// A docWriter is bound to its transaction and used by one goroutine.
type docWriter struct {
	raw     *bbolt.Bucket
	indexes []index.Index
}

// newDocWriter returns a writer for the movies collection in tx, with the
// collection's indexes as Clover's metadata lists them.
func newDocWriter(tx *bbolt.Tx, db *clover.DB, counts *readCounts) (*docWriter, error) {
	infos, err := db.ListIndexes(collection)
	if err != nil {
		return nil, fmt.Errorf("list indexes: %w", err)
	}
	st, err := (&txStore{tx: tx, counts: counts}).Begin(true)
	if err != nil {
		return nil, err
	}
	w := &docWriter{raw: tx.Bucket(cloverBucket)}
	for _, info := range infos {
		idx := index.CreateIndex(collection, info.Field, info.Type, st)
		if idx == nil {
			return nil, fmt.Errorf("index %s: unknown index type %d", info.Field, info.Type)
		}
		w.indexes = append(w.indexes, idx)
	}
	return w, nil
}

// stored returns the stored document of movie, or nil when it has none.
func (w *docWriter) stored(movie int64) (*d.Document, error) {
	v := w.raw.Get(docKey(movie))
	if v == nil {
		return nil, nil
	}
	doc, err := d.Decode(v)
	if err != nil {
		return nil, fmt.Errorf("decode movie %d: %w", movie, err)
	}
	return doc, nil
}

// replace overwrites the stored document old of movie with doc: the index
// entries of old are removed, those of doc added, and doc validated,
// encoded and saved, in UpdateById's order.
func (w *docWriter) replace(movie int64, old, doc *d.Document) error {
	for _, idx := range w.indexes {
		if err := idx.Remove(old.ObjectId(), old.Get(idx.Field())); err != nil {
			return fmt.Errorf("remove %s index entry: %w", idx.Field(), err)
		}
	}
	for _, idx := range w.indexes {
		if err := idx.Add(doc.ObjectId(), doc.Get(idx.Field()), doc.TTL()); err != nil {
			return fmt.Errorf("add %s index entry: %w", idx.Field(), err)
		}
	}
	if err := d.Validate(doc); err != nil {
		return err
	}
	data, err := d.Encode(doc)
	if err != nil {
		return err
	}
	return w.raw.Put(docKey(movie), data)
}

// update writes m over its movie's stored document if m is newer, with the
// results of the package's update (UpdateById) path: exists is false when
// the movie has no document (nothing is written), oldPart is the partition
// it was stored under. A document that is not newer is left untouched
// (UpdateById rewrites it unchanged) and refused or skipped (replay).
func (w *docWriter) update(m engine.MovieStats, replay bool) (oldPart int32, exists bool, err error) {
	old, err := w.stored(m.MovieID)
	if err != nil {
		return 0, true, fmt.Errorf("update movie %d: %w", m.MovieID, err)
	}
	if old == nil {
		return 0, false, nil
	}
	v, err := moviedoc.ToInt64(old.Get(moviedoc.FieldVersion))
	if err != nil {
		return 0, true, fmt.Errorf("update movie %d: corrupt stored document: %w", m.MovieID, err)
	}
	if m.Version <= v {
		return m.Partition, true, stale(m, v, replay)
	}
	p, err := moviedoc.ToInt64(old.Get(moviedoc.FieldPartition))
	if err != nil {
		return 0, true, fmt.Errorf("update movie %d: corrupt stored document: %w", m.MovieID, err)
	}
	if err := w.replace(m.MovieID, old, moviedoc.ToDocument(m)); err != nil {
		return 0, true, fmt.Errorf("update movie %d: %w", m.MovieID, err)
	}
	return int32(p), true, nil
}
