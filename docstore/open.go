package docstore

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

const (
	storeDir = "store"        // the Pebble database inside the data directory
	dbFileV1 = "keepstate.db" // the v1 store, a bbolt file (oldStoreError), never touched
)

// formatVersion is the marker that tells a keepstate store from anything
// else (v1 was the bbolt file dbFileV1). v2 kept values in the members
// keys, which v3 writes only for new or moved documents (memberMark). Open
// upgrades a v2 store by rewriting the marker alone (v3 ignores what v2
// wrote), which keeps a v2 binary, trusting those values, from opening it.
const (
	formatVersion   = "keepstate-docstore v3 (clover on pebble)"
	formatVersionV2 = "keepstate-docstore v2 (clover on pebble)"
)

var formatKey = nsKey(nsMeta, []byte("format"))

// ignorable entries may sit in a data directory without a store (a
// volume's lost+found, a marker that outlived its store: wipeCorrupt).
var ignorable = map[string]bool{"lost+found": true, lockInfoFile: true, corruptMarker: true}

// Open opens the store in dir, creating the directory and an empty store
// when needed. It fails with ErrNotStore, leaving everything untouched,
// when dir is a file, holds files but no keepstate store, or only an old
// bbolt store (ErrOldStore); with ErrLocked when another process holds dir
// past the lock timeout; with ErrCorrupt when the store is damaged, unless
// WithRebuildCorrupt wipes it and opens it empty. The movie layout of
// earlier versions is migrated into the table "movies" (else
// ErrMigration). The returned Store is safe for concurrent use.
func Open(dir string, opts ...Option) (*Store, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	log := cmp.Or(o.logger, slog.New(slog.DiscardHandler))
	found, err := prepareDir(dir)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	lock, err := lockDir(dir, o.lockTimeout)
	if err != nil {
		return nil, err
	}
	o.corruptSink = &corruptSink{}
	s, err := openChecked(dir, found, o, log)
	if err == nil {
		if err = lock.record(); err != nil {
			_ = s.kv.close(true)
			err = fmt.Errorf("open docstore %s: %w", dir, err)
		}
	}
	if err != nil {
		_ = lock.f.Close()
		return nil, err
	}
	s.lock = lock
	log.Info("docstore opened", "dir", dir, "created", !found.store, "fsync", o.fsync,
		"cache_bytes", o.cacheBytes, "memtable_bytes", o.memtableBytes,
		"bulk_cache_docs", s.bulkMax, "ingest_chunk_docs", s.ingestChunk, "took", time.Since(start))
	return s, nil
}

// openChecked is open for a dir that may hold a damaged store (an earlier
// run's marker, or Pebble finds it corrupt): o.rebuild wipes it and opens
// an empty one; otherwise it fails with ErrCorrupt.
func openChecked(dir string, found contents, o options, log *slog.Logger) (*Store, error) {
	why, marked, err := readCorruptMarker(dir)
	if err != nil {
		return nil, fmt.Errorf("open docstore %s: %w", dir, err)
	}
	if marked {
		if !o.rebuild {
			return nil, fmt.Errorf("open docstore %s: %w: an earlier run found it damaged (%s); move the directory away, or open it with the rebuild option, to rebuild the state from the changelog",
				dir, ErrCorrupt, why)
		}
		if err := wipeCorrupt(dir); err != nil {
			return nil, err
		}
		log.Warn("docstore: wiped the store an earlier run found corrupt; the engine restores the state from the changelog", "dir", dir, "found", why)
		found.store = false
	}
	s, err := open(dir, found, o, log)
	if err == nil || !errors.Is(err, ErrCorrupt) {
		return s, err
	}
	if !o.rebuild {
		return nil, err
	}
	if werr := wipeCorrupt(dir); werr != nil {
		return nil, werr
	}
	log.Warn("docstore: wiped a store that failed its checksums on open; the engine restores the state from the changelog", "dir", dir, "err", err)
	found.store = false
	return open(dir, found, o, log)
}

// open opens (or creates) the store of dir, locked by the caller.
func open(dir string, found contents, o options, log *slog.Logger) (*Store, error) {
	path := filepath.Join(dir, storeDir)
	if found.v1 {
		log.Warn("docstore: the data directory also holds a store from before the Pebble engine, which this version does not read; it can be deleted",
			"dir", dir, "file", dbFileV1)
	}
	// Files a crash left half written for ingestion.
	if err := os.RemoveAll(path + ingestDirSuffix); err != nil {
		return nil, fmt.Errorf("open docstore %s: %w", dir, err)
	}
	openKV := o.openKV
	if openKV == nil {
		openKV = func(path string, o options, log *slog.Logger, mustExist bool) (kv, error) {
			return openPebble(path, o, log, mustExist)
		}
		if found.store {
			removed, err := removeHalfCreated(dir, path, log)
			if err != nil {
				return nil, err
			}
			found.store = !removed
		}
	}
	db, err := openKV(path, o, log, found.store)
	if err != nil {
		if found.store && !pebble.IsCorruptionError(err) {
			return nil, fmt.Errorf("%w: %s: %s is not a readable store: %v", ErrNotStore, dir, storeDir, err)
		}
		return nil, openError(dir, err)
	}
	if err := initialize(db); err != nil {
		_ = db.close(true)
		return nil, openError(dir, err)
	}
	if err := (movieMigration{db: db, log: log, batch: migrateBatchDocs}).run(); err != nil {
		_ = db.close(false)
		return nil, openError(dir, err)
	}
	bulkMax, ingestChunk := o.bulkLimits()
	s := &Store{dir: dir, kv: db, sync: o.fsync, noBulk: o.noBulk, ingestChunk: ingestChunk, log: log, counts: &readCounts{},
		cacheMax: o.writeCache, bulkMax: bulkMax, condemnedCh: make(chan struct{}),
		guard: diskGuard{dir: dir, reserve: uint64(o.diskReserve)}}
	if o.corruptSink != nil {
		o.corruptSink.s.Store(s)
	}
	return s, nil
}

// openError wraps an error met opening the store of dir (ErrCorrupt when
// a file failed its checksum).
func openError(dir string, err error) error {
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("open docstore %s: %w: a file failed its checksum: %w", dir, ErrCorrupt, err)
	}
	return fmt.Errorf("open docstore %s: %w", dir, err)
}

// contents is what prepareDir found in a data directory: the Pebble store,
// an old bbolt store file (dbFileV1).
type contents struct{ store, v1 bool }

// prepareDir creates dir if missing and refuses a path that is not a
// directory, or that holds other files or an old bbolt store file and no
// Pebble store.
func prepareDir(dir string) (contents, error) {
	var c contents
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return c, fmt.Errorf("create data dir %s: %w", dir, err)
		}
		return c, nil
	case err != nil:
		return c, fmt.Errorf("data dir %s: %w", dir, err)
	case !fi.IsDir():
		return c, fmt.Errorf("%w: %s is a file, not a directory", ErrNotStore, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return c, fmt.Errorf("data dir %s: %w", dir, err)
	}
	var foreign []string
	for _, e := range entries {
		switch e.Name() {
		case storeDir:
			if !e.IsDir() {
				return c, fmt.Errorf("%w: %s in %s is not a directory", ErrNotStore, storeDir, dir)
			}
			inside, err := os.ReadDir(filepath.Join(dir, storeDir))
			if err != nil {
				return c, fmt.Errorf("data dir %s: %w", dir, err)
			}
			c.store = len(inside) > 0
		case dbFileV1:
			if !e.Type().IsRegular() {
				foreign = append(foreign, e.Name())
				break
			}
			c.v1 = true
		case storeDir + ingestDirSuffix:
		default:
			if !ignorable[e.Name()] {
				foreign = append(foreign, e.Name())
			}
		}
	}
	if c.v1 && !c.store {
		return c, oldStoreError(dir)
	}
	if len(foreign) > 0 && !c.store {
		return c, fmt.Errorf("%w: data dir %s holds %d entries (for example %q) but no keepstate store; refusing to use it",
			ErrNotStore, dir, len(foreign), foreign[0])
	}
	return c, nil
}

// oldStoreError refuses a data directory holding a v1 store (dbFileV1)
// and no Pebble store; the changelog restores its state once it is gone.
func oldStoreError(dir string) error {
	return fmt.Errorf("%w: data dir %s holds %s, a store from before the Pebble engine, which this version no longer reads; "+
		"run `keepstate reset` (with this --data-dir) to remove it: the next start restores the state from the changelog",
		ErrOldStore, dir, dbFileV1)
}

// ErrOldStore means the data directory holds a store of the old bbolt
// format, which this version does not read (RemoveOldStore deletes it).
// It wraps ErrNotStore.
var ErrOldStore = fmt.Errorf("%w (old bbolt format)", ErrNotStore)

// RemoveOldStore deletes the old bbolt store file of dir, if any, and the
// directory an interrupted migration to Pebble left, so that Open can
// make a new store there (keepstate reset). It reports whether there was
// a file to delete.
func RemoveOldStore(dir string) (bool, error) {
	err := os.Remove(filepath.Join(dir, dbFileV1))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("remove the old store of %s: %w", dir, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "store.migrating")); err != nil {
		return true, fmt.Errorf("remove the old store of %s: %w", dir, err)
	}
	return true, syncDir(dir)
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

// initialize checks the format marker of an existing store (upgrading a
// v2 marker), or writes the marker of an empty one (synced). It refuses,
// without writing, a Pebble database holding other data or another marker.
func initialize(db kv) error {
	snap := db.snapshot()
	marker, err := snap.get(formatKey)
	var held bool
	if err == nil && marker == nil {
		held, err = anyKey(snap, nil, nil)
	}
	snap.release()
	switch {
	case err != nil:
		return err
	case string(marker) == formatVersion:
		return nil
	case marker != nil && string(marker) != formatVersionV2:
		return fmt.Errorf("%w: format %q, want %q", ErrNotStore, marker, formatVersion)
	case held:
		return fmt.Errorf("%w: %s holds data and no keepstate marker", ErrNotStore, storeDir)
	}
	// An empty store, or a v2 one (upgraded by its marker alone).
	b := db.batch()
	defer b.release()
	if err := b.set(formatKey, []byte(formatVersion)); err != nil {
		return err
	}
	return b.commit(true)
}

// Close flushes and closes the engine and releases the directory. Not
// safe concurrently with other methods; a second call returns nil.
func (s *Store) Close() error {
	s.stopping.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	sound := s.CondemnedErr() == nil // a condemned store writes nothing more
	s.wmu.Lock()
	if sound {
		s.materializeTables()
	}
	s.wmu.Unlock()
	// No flush on a full disk (Pebble cannot survive a failed write).
	err := s.kv.close(sound && s.guard.check() == nil)
	if lerr := s.lock.unlock(); err == nil && lerr != nil {
		err = fmt.Errorf("release lock: %w", lerr)
	}
	if err != nil {
		return fmt.Errorf("close docstore %s: %w", s.dir, err)
	}
	s.log.Info("docstore closed", "dir", s.dir)
	return nil
}
