package boltstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
	"github.com/ostafen/clover/v2"
	d "github.com/ostafen/clover/v2/document"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Store is the Clover store of keepstate. All methods are safe for
// concurrent use (except Close); writes are serialized by bbolt and readers
// see only committed batches.
type Store struct {
	// cloverUpdates writes existing documents through Clover's UpdateById
	// instead of docWriter (withCloverUpdates).
	cloverUpdates bool
	dir           string
	db            *bbolt.DB
	log           *slog.Logger
	counts        *readCounts
	closed        atomic.Bool
}

var (
	_ engine.Store            = (*Store)(nil)
	_ engine.PartitionScanner = (*Store)(nil)
	_ engine.Resetter         = (*Store)(nil)
)

// Dir returns the data directory of the store.
func (s *Store) Dir() string { return s.dir }

// view runs fn in a read-only bbolt transaction with a Clover handle
// joined to it.
func (s *Store) view(ctx context.Context, fn func(tx *bbolt.Tx, db *clover.DB) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.wrap(s.db.View(func(tx *bbolt.Tx) error {
		db, err := clover.OpenWithStore(&txStore{tx: tx, counts: s.counts})
		if err != nil {
			return err
		}
		return fn(tx, db)
	}))
}

// update runs fn in one read-write bbolt transaction with a Clover handle
// joined to it: everything fn writes commits together, or nothing when fn
// returns an error.
func (s *Store) update(ctx context.Context, fn func(tx *bbolt.Tx, db *clover.DB) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.wrap(s.db.Update(func(tx *bbolt.Tx) error {
		db, err := clover.OpenWithStore(&txStore{tx: tx, counts: s.counts})
		if err != nil {
			return err
		}
		return fn(tx, db)
	}))
}

// wrap marks a closed database as unavailable.
func (s *Store) wrap(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("boltstore %s closed: %w", s.dir, engine.ErrUnavailable)
	}
	return err
}

func partitionKey(p int32) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(p))
}

func getInt64(b *bbolt.Bucket, key []byte) (int64, bool) {
	v := b.Get(key)
	if len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

func putInt64(b *bbolt.Bucket, key []byte, v int64) error {
	return b.Put(key, binary.BigEndian.AppendUint64(nil, uint64(v)))
}

// Claim makes the caller the writer of partition p and returns its new
// epoch, one more than the last epoch claimed for p (the first is 1).
func (s *Store) Claim(ctx context.Context, p int32) (int64, error) {
	var epoch int64
	err := s.update(ctx, func(tx *bbolt.Tx, _ *clover.DB) error {
		b := tx.Bucket(epochsBucket)
		last, _ := getInt64(b, partitionKey(p))
		epoch = last + 1
		return putInt64(b, partitionKey(p), epoch)
	})
	if err != nil {
		return 0, fmt.Errorf("claim partition %d: %w", p, err)
	}
	return epoch, nil
}

// Checkpoint returns the next changelog offset to read for partition p; ok
// is false when the store holds no checkpoint for p.
func (s *Store) Checkpoint(ctx context.Context, p int32) (next int64, ok bool, err error) {
	err = s.view(ctx, func(tx *bbolt.Tx, _ *clover.DB) error {
		next, ok = getInt64(tx.Bucket(checkpointsBucket), partitionKey(p))
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("checkpoint of partition %d: %w", p, err)
	}
	return next, ok, nil
}

// Get returns the aggregate of one movie by its _id (a key lookup, no
// scan), or ErrNotFound.
func (s *Store) Get(ctx context.Context, movieID int64) (engine.MovieStats, error) {
	var m engine.MovieStats
	err := s.view(ctx, func(_ *bbolt.Tx, db *clover.DB) error {
		var err error
		var ok bool
		m, ok, err = find(db, movieID)
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

// find looks a movie up by _id; Clover returns (nil, nil) when it is missing.
func find(db *clover.DB, movieID int64) (engine.MovieStats, bool, error) {
	doc, err := db.FindById(collection, moviedoc.DocID(movieID))
	if err != nil || doc == nil {
		return engine.MovieStats{}, false, err
	}
	m, err := moviedoc.FromDocument(doc)
	return m, err == nil, err
}

// Load returns the stored documents for ids, all read from one snapshot;
// ids without a document are absent from the map.
func (s *Store) Load(ctx context.Context, ids []int64) (map[int64]engine.MovieStats, error) {
	out := make(map[int64]engine.MovieStats, len(ids))
	err := s.view(ctx, func(_ *bbolt.Tx, db *clover.DB) error {
		for _, id := range ids {
			m, ok, err := find(db, id)
			if err != nil {
				return err
			}
			if ok {
				out[id] = m
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load %d movies: %w", len(ids), err)
	}
	return out, nil
}

// Apply writes b in one bbolt transaction: every document (upserted
// through Clover, indexes included) and the partition checkpoint, or
// nothing. b.Epoch must be the partition's current claim (else ErrFenced);
// see engine.Store for the version rules.
func (s *Store) Apply(ctx context.Context, b engine.Batch) error {
	for _, m := range b.Docs {
		if err := m.Validate(); err != nil { // before anything: NaN would panic inside Clover
			return fmt.Errorf("apply partition %d: %w", b.Partition, err)
		}
	}
	err := s.update(ctx, func(tx *bbolt.Tx, db *clover.DB) error {
		claimed, ok := getInt64(tx.Bucket(epochsBucket), partitionKey(b.Partition))
		switch {
		case !ok:
			return fmt.Errorf("%w: epoch %d, but the partition has no claim (store reset or lost?)", engine.ErrFenced, b.Epoch)
		case b.Epoch != claimed:
			return fmt.Errorf("%w: epoch %d, partition claimed with epoch %d", engine.ErrFenced, b.Epoch, claimed)
		}
		if err := s.writeDocs(tx, db, b.Docs, b.Replay); err != nil {
			return err
		}
		return putInt64(tx.Bucket(checkpointsBucket), partitionKey(b.Partition), b.Checkpoint)
	})
	if err != nil {
		return fmt.Errorf("apply partition %d (%d docs): %w", b.Partition, len(b.Docs), err)
	}
	return nil
}

// writeDocs upserts docs in order, as if one by one: a document whose
// version is not newer than the stored one (or than an earlier document of
// the same batch) is skipped when replay is set, and refuses the batch
// with ErrFenced otherwise. Clover has no upsert: existing movies go
// through docWriter (UpdateById's work without its per-call overhead), new
// ones are collected and inserted in one Clover call.
// The members bucket gets a key for each new movie and each movie that
// changed partition.
func (s *Store) writeDocs(tx *bbolt.Tx, db *clover.DB, docs []engine.MovieStats, replay bool) error {
	members := tx.Bucket(membersBucket)
	members.FillPercent = fillPercent
	var w updater = cloverUpdater{db: db, raw: tx.Bucket(cloverBucket)}
	if !s.cloverUpdates {
		var err error
		if w, err = newDocWriter(tx, db, s.counts); err != nil {
			return err
		}
	}
	// Write in movie id order (stable: a movie's documents keep their
	// order), so bbolt walks its pages in key order.
	docs = slices.Clone(docs)
	slices.SortStableFunc(docs, func(a, b engine.MovieStats) int { return cmp.Compare(a.MovieID, b.MovieID) })
	var fresh []engine.MovieStats
	freshAt := map[int64]int{} // movie -> index in fresh
	for _, m := range docs {
		if i, ok := freshAt[m.MovieID]; ok { // new in this batch, not inserted yet
			if m.Version <= fresh[i].Version {
				if err := stale(m, fresh[i].Version, replay); err != nil {
					return err
				}
				continue
			}
			fresh[i] = m
			continue
		}
		old, exists, err := w.update(m, replay)
		switch {
		case err != nil:
			return err
		case !exists:
			freshAt[m.MovieID] = len(fresh)
			fresh = append(fresh, m)
		case old != m.Partition:
			if err := members.Delete(memberKey(old, m.MovieID)); err != nil {
				return err
			}
			if err := members.Put(memberKey(m.Partition, m.MovieID), []byte{}); err != nil {
				return err
			}
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	docsIn := make([]*d.Document, len(fresh))
	for i, m := range fresh {
		docsIn[i] = moviedoc.ToDocument(m)
		if err := members.Put(memberKey(m.Partition, m.MovieID), []byte{}); err != nil {
			return err
		}
	}
	if err := db.Insert(collection, docsIn...); err != nil {
		return fmt.Errorf("insert %d new movies: %w", len(fresh), err)
	}
	return nil
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

// updater replaces the stored document of m if m is newer. exists is false
// when the movie has no document (then nothing is written); oldPart is the
// partition it was stored under before this write. A document that is not
// newer is refused with ErrFenced, or skipped when replay is set.
type updater interface {
	update(m engine.MovieStats, replay bool) (oldPart int32, exists bool, err error)
}

// cloverUpdater is the updater through clover.DB.UpdateById, one call per
// document. It is the reference for docWriter (which writes the same
// thing, faster) and used only when the store is opened with
// withCloverUpdates (tests and benchmarks).
type cloverUpdater struct {
	db  *clover.DB
	raw *bbolt.Bucket
}

func (u cloverUpdater) update(m engine.MovieStats, replay bool) (oldPart int32, exists bool, err error) {
	// A new movie skips UpdateById (which decodes Clover's collection
	// metadata only to report it missing): one key lookup, no decoding.
	if u.raw.Get(docKey(m.MovieID)) == nil {
		return 0, false, nil
	}
	return update(u.db, m, replay)
}

// update replaces the stored document of m through Clover's UpdateById
// (see updater).
func update(db *clover.DB, m engine.MovieStats, replay bool) (oldPart int32, exists bool, err error) {
	doc := moviedoc.ToDocument(m)
	var (
		isStale   bool
		stored    int64
		decodeErr error
	)
	oldPart = m.Partition
	err = db.UpdateById(collection, doc.ObjectId(), func(old *d.Document) *d.Document {
		v, err := moviedoc.ToInt64(old.Get(moviedoc.FieldVersion))
		if err != nil {
			decodeErr = err
			return old
		}
		if m.Version <= v {
			isStale, stored = true, v
			return old // rewritten unchanged; the caller refuses or skips
		}
		p, err := moviedoc.ToInt64(old.Get(moviedoc.FieldPartition))
		if err != nil {
			decodeErr = err
			return old
		}
		oldPart = int32(p)
		return doc
	})
	switch {
	case errors.Is(err, clover.ErrDocumentNotExist):
		return 0, false, nil
	case err != nil:
		return 0, true, fmt.Errorf("update movie %d: %w", m.MovieID, err)
	case decodeErr != nil:
		return 0, true, fmt.Errorf("update movie %d: corrupt stored document: %w", m.MovieID, decodeErr)
	case isStale:
		return m.Partition, true, stale(m, stored, replay)
	}
	return oldPart, true, nil
}
