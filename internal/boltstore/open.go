package boltstore

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ostafen/clover/v2"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// dbFile is the bbolt file inside the data directory.
const dbFile = "keepstate.db"

// formatVersion is the marker that tells a keepstate store from anything else.
const formatVersion = "keepstate-docstore v1"

var (
	metaBucket        = []byte("meta")
	checkpointsBucket = []byte("checkpoints")
	epochsBucket      = []byte("epochs")
	membersBucket     = []byte("members")
	formatKey         = []byte("format")
)

// ignorable entries may sit in a data directory that holds no store yet
// (a fresh volume's root has lost+found).
var ignorable = map[string]bool{"lost+found": true, lockInfoFile: true}

// Open opens the store in dir, creating the directory and an empty store
// when needed. It fails with ErrNotStore, leaving everything untouched,
// when dir is a file or holds files but no keepstate store, and with
// ErrLocked when another process holds dir for longer than the lock
// timeout. The returned Store is safe for concurrent use.
func Open(dir string, opts ...Option) (*Store, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	log := o.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, dbFile)
	start := time.Now()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout:      o.lockTimeout,
		NoSync:       !o.fsync,
		FreelistType: bbolt.FreelistMapType,
		// NoFreelistSync stays off: it saves no measurable page writes
		// here (the freelist is a few pages per commit) and makes every
		// open rebuild the freelist by walking the whole file (0.8 s at
		// 1M movies, docs/benchmarks.md, "Clover store").
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, lockedError(dir, o.lockTimeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrChecksum):
		return nil, fmt.Errorf("%w: %s: %s is not a valid database file: %v", ErrNotStore, dir, dbFile, err)
	case err != nil:
		return nil, fmt.Errorf("open boltstore %s: %w", dir, err)
	}
	created, err := initialize(db)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open boltstore %s: %w", dir, err)
	}
	if err := writeLockInfo(dir); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open boltstore %s: write lock info: %w", dir, err)
	}
	log.Info("boltstore opened", "dir", dir, "created", created, "fsync", o.fsync,
		"took", time.Since(start))
	return &Store{dir: dir, db: db, log: log, counts: &readCounts{}, cloverUpdates: o.cloverUpdates}, nil
}

// prepareDir creates dir if missing and refuses a path that is not a
// directory, or a directory holding other files and no store.
func prepareDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create data dir %s: %w", dir, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("data dir %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is a file, not a directory", ErrNotStore, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	var foreign []string
	for _, e := range entries {
		switch {
		case e.Name() == dbFile:
			if !e.Type().IsRegular() {
				return fmt.Errorf("%w: %s in %s is not a regular file", ErrNotStore, dbFile, dir)
			}
			return nil
		case !ignorable[e.Name()]:
			foreign = append(foreign, e.Name())
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("%w: data dir %s holds %d entries (for example %q) but no %s; refusing to use it",
			ErrNotStore, dir, len(foreign), foreign[0], dbFile)
	}
	return nil
}

// initialize checks the format marker of an existing store, or sets up a
// new one (buckets, collection and its indexes, created while the
// collection is empty). It refuses, without writing, a bbolt file of
// another application.
func initialize(db *bbolt.DB) (created bool, err error) {
	var found bool
	err = db.View(func(tx *bbolt.Tx) error {
		if meta := tx.Bucket(metaBucket); meta != nil {
			if v := string(meta.Get(formatKey)); v != formatVersion {
				return fmt.Errorf("%w: format %q, want %q", ErrNotStore, v, formatVersion)
			}
			found = true
			return nil
		}
		return tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
			return fmt.Errorf("%w: %s holds bucket %q and no keepstate marker", ErrNotStore, dbFile, name)
		})
	})
	if err != nil || found {
		return false, err
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucket(metaBucket)
		if err != nil {
			return err
		}
		if err := meta.Put(formatKey, []byte(formatVersion)); err != nil {
			return err
		}
		return createData(tx)
	})
	return err == nil, err
}

// dataBuckets hold the data (everything but the format marker).
var dataBuckets = [][]byte{cloverBucket, checkpointsBucket, epochsBucket, membersBucket}

// createData creates the empty data buckets and Clover collection with its
// indexes inside tx.
func createData(tx *bbolt.Tx) error {
	for _, name := range dataBuckets {
		if _, err := tx.CreateBucket(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	cdb, err := clover.OpenWithStore(&txStore{tx: tx, counts: &readCounts{}})
	if err != nil {
		return err
	}
	if err := cdb.CreateCollection(collection); err != nil {
		return fmt.Errorf("create collection: %w", err)
	}
	if err := cdb.CreateIndex(collection, fieldRank); err != nil {
		return fmt.Errorf("create index %s: %w", fieldRank, err)
	}
	return nil
}

// Close releases the directory. It is not safe to call concurrently with
// other methods; calling it twice returns nil.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	lockErr := removeLockInfo(s.dir)
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close boltstore %s: %w", s.dir, err)
	}
	if lockErr != nil {
		return fmt.Errorf("close boltstore %s: remove lock info: %w", s.dir, lockErr)
	}
	s.log.Info("boltstore closed", "dir", s.dir)
	return nil
}
