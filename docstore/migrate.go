package docstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
	d "github.com/ostafen/clover/v2/document"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The old store (format v1, until this package moved to Pebble) was one
// bbolt file in the data directory: buckets meta (format marker),
// checkpoints and epochs (partition -> int64), members, and clover
// (Clover's keys, the same documents as now).
const (
	dbFileV1        = "keepstate.db"
	formatVersionV1 = "keepstate-docstore v1"
	migratingDir    = "store.migrating"
)

// migrateBatch is how many documents a migration batch carries.
const migrateBatch = 10_000

// migrate copies the v1 bbolt store of dir into a new Pebble store: every
// document (re-indexed), checkpoint and claim epoch. It builds the new
// store aside and renames it into place only when complete, then removes
// the old file, so a crash at any point leaves either the old store or the
// new one. The old file is read only; a file that is not a keepstate v1
// store is refused with ErrNotStore and left untouched.
func migrate(dir string, o options, log *slog.Logger) error {
	start := time.Now()
	oldPath := filepath.Join(dir, dbFileV1)
	old, err := bbolt.Open(oldPath, 0o600, &bbolt.Options{ReadOnly: true, Timeout: o.lockTimeout})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return lockedError(dir, o.lockTimeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrChecksum):
		return fmt.Errorf("%w: %s: %s is not a valid database file: %v", ErrNotStore, dir, dbFileV1, err)
	case err != nil:
		return fmt.Errorf("open docstore %s: old store %s: %w", dir, dbFileV1, err)
	}
	defer old.Close()
	if err := checkV1(old); err != nil {
		return fmt.Errorf("%w: %s: %s %v", ErrNotStore, dir, dbFileV1, err)
	}
	tmp := filepath.Join(dir, migratingDir)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("migrate %s: %w", dir, err)
	}
	log.Info("docstore migrating the old bbolt store", "dir", dir, "from", formatVersionV1, "to", formatVersion)
	db, err := openPebble(tmp, o, log, false)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", dir, err)
	}
	n, err := copyV1(old, db)
	if cerr := db.close(true); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, storeDir))
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("migrate %s: %w (the old store is untouched)", dir, err)
	}
	_ = old.Close()
	if err := os.Remove(oldPath); err != nil {
		return fmt.Errorf("migrate %s: remove the migrated %s: %w", dir, dbFileV1, err)
	}
	log.Info("docstore migrated", "dir", dir, "docs", n, "took", time.Since(start))
	return nil
}

// checkV1 verifies the v1 format marker.
func checkV1(old *bbolt.DB) error {
	return old.View(func(tx *bbolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		if meta == nil {
			var name []byte
			_ = tx.ForEach(func(n []byte, _ *bbolt.Bucket) error { name = n; return errors.New("stop") })
			return fmt.Errorf("holds bucket %q and no keepstate marker", name)
		}
		if v := string(meta.Get([]byte("format"))); v != formatVersionV1 {
			return fmt.Errorf("has format %q, want %q", v, formatVersionV1)
		}
		for _, name := range []string{"clover", "checkpoints", "epochs"} {
			if tx.Bucket([]byte(name)) == nil {
				return fmt.Errorf("has no %s bucket", name)
			}
		}
		return nil
	})
}

// copyV1 writes the contents of the v1 store into the empty db and returns
// the number of documents. Only the last batch is synced (the new store
// is renamed into place after Close, which flushes everything).
func copyV1(old *bbolt.DB, db *pebbleKV) (int, error) {
	if err := initialize(db); err != nil {
		return 0, err
	}
	n := 0
	err := old.View(func(tx *bbolt.Tx) error {
		var docs []engine.MovieStats
		flush := func() error {
			b := db.batch()
			defer b.release()
			w := newDocWriter(b, &readCounts{})
			none := func(int64) (prior, bool, error) { return prior{}, false, nil }
			if err := writeDocs(w, docs, true, none, func(int64, prior) {}); err != nil {
				return err
			}
			n += len(docs)
			docs = docs[:0]
			return b.commit(false)
		}
		c := tx.Bucket([]byte("clover")).Cursor()
		for k, v := c.Seek(docKeyPrefix); k != nil && bytes.HasPrefix(k, docKeyPrefix); k, v = c.Next() {
			doc, err := d.Decode(v)
			if err != nil {
				return fmt.Errorf("decode %s: %w", k, err)
			}
			m, err := moviedoc.FromDocument(doc)
			if err != nil {
				return err
			}
			docs = append(docs, m)
			if len(docs) == migrateBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := flush(); err != nil {
			return err
		}
		b := db.batch()
		defer b.release()
		for name, ns := range map[string]byte{"checkpoints": nsCheckpoints, "epochs": nsEpochs} {
			err := tx.Bucket([]byte(name)).ForEach(func(k, v []byte) error {
				if len(k) != 4 || len(v) != 8 {
					return fmt.Errorf("bucket %s: malformed entry %x=%x", name, k, v)
				}
				return b.set(partitionKey(ns, int32(binary.BigEndian.Uint32(k))), v)
			})
			if err != nil {
				return err
			}
		}
		return b.commit(true)
	})
	return n, err
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
