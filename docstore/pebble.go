package docstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sync/errgroup"
)

// pebbleKV is the kv engine on Pebble, an LSM tree: a batch is one append
// to the write-ahead log (one fsync when synced) and a memtable insert.
type pebbleKV struct {
	db   *pebble.DB
	opts *pebble.Options
	tmp  string // ingested files before Pebble links them in, beside the database
	seq  int
	gate *compactionGate
}

var _ kvIngester = (*pebbleKV)(nil)

// openPebble opens (or, unless mustExist, creates) the Pebble database in
// path with the memory bounds of o.
func openPebble(path string, o options, log *slog.Logger, mustExist bool) (*pebbleKV, error) {
	cache := pebble.NewCache(o.cacheBytes)
	gate := newCompactionGate(log)
	opts := &pebble.Options{
		Cache:                       cache,
		FS:                          bufferedFS{vfs.Default},
		MemTableSize:                uint64(o.memtableBytes),
		MemTableStopWritesThreshold: MaxMemtables,
		ErrorIfNotExists:            mustExist,
		Logger:                      pebbleLogger{log: log},
		EventListener:               corruptionListener(log, o.corruptSink),
		// Level 0 is compacted at 4 files (2 made restores slower); writes
		// stall only far beyond, so a restore may outpace compaction.
		L0CompactionThreshold: 4,
		L0StopWritesThreshold: 1000,
		// One compaction at a time: the machine has 2 cores and the
		// foreground (applies, queries) must keep one.
		CompactionConcurrencyRange: func() (int, int) { return 1, 1 },
	}
	// No tombstone-density compactions: index blocks are always dense with
	// deletions (every index value change deletes the old entry), and the
	// default spent a large share of all compactions rewriting them, for
	// no faster queries.
	opts.Experimental.TombstoneDenseCompactionThreshold = -1
	opts.Experimental.CompactionScheduler = gate
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10) // point reads of missing keys skip files
		// No block compression: Snappy saved disk but cost compaction CPU,
		// which competes with restores on 2 cores.
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	}
	db, err := pebble.Open(path, opts)
	cache.Unref() // the DB holds its own reference
	if err != nil {
		return nil, err
	}
	return &pebbleKV{db: db, opts: opts, tmp: path + ingestDirSuffix, gate: gate}, nil
}

func (p *pebbleKV) snapshot() kvReader { return &pebbleReader{r: p.db.NewSnapshot()} }

func (p *pebbleKV) batch() kvBatch {
	b := p.db.NewIndexedBatch()
	return &pebbleBatch{pebbleReader: pebbleReader{r: b}, b: b}
}

func (p *pebbleKV) writeBatch(size int) kvBatch {
	return &pebbleBatch{pebbleReader: pebbleReader{r: dbReader{p.db}}, b: p.db.NewBatchWithSize(size)}
}

// close flushes the memtable first when flush is set, so that the next
// open has no write-ahead log to replay.
func (p *pebbleKV) close(flush bool) error {
	var ferr error
	if flush {
		ferr = p.db.Flush()
	}
	if err := p.db.Close(); err != nil {
		return err
	}
	if ferr != nil {
		return fmt.Errorf("flush before close: %w", ferr)
	}
	return nil
}

// dbReader reads the committed state of the database; Close does nothing.
type dbReader struct{ *pebble.DB }

func (dbReader) Close() error { return nil }

// pebbleReader reads a snapshot, a batch or (dbReader) the database.
type pebbleReader struct {
	r   pebble.Reader
	buf []byte
}

func (r *pebbleReader) get(key []byte) ([]byte, error) {
	v, closer, err := r.r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r.buf = append(r.buf[:0], v...)
	_ = closer.Close()
	if r.buf == nil {
		r.buf = []byte{}
	}
	return r.buf, nil
}

func (r *pebbleReader) iter(lower, upper []byte, reverse bool) (kvIter, error) {
	it, err := r.r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	return &pebbleIter{it: it, reverse: reverse}, nil
}

func (r *pebbleReader) release() { _ = r.r.Close() }

// release closes the batch (its reader too, unless a dbReader).
func (b *pebbleBatch) release() { _ = b.b.Close() }

type pebbleBatch struct {
	pebbleReader
	b *pebble.Batch
}

func (b *pebbleBatch) set(key, value []byte) error { return b.b.Set(key, value, nil) }
func (b *pebbleBatch) del(key []byte) error        { return b.b.Delete(key, nil) }
func (b *pebbleBatch) delRange(lower, upper []byte) error {
	return b.b.DeleteRange(lower, upper, nil)
}

func (b *pebbleBatch) commit(sync bool) error { return b.b.Commit(&pebble.WriteOptions{Sync: sync}) }

type pebbleIter struct {
	it      *pebble.Iterator
	reverse bool
	// failed is the first error a positioning call met (a damaged block):
	// every later call reports no key and close returns it, so a caller
	// that checks close never takes a failed read for absent keys.
	failed error
}

// ok records the iterator's error when a positioning call reported no key.
func (i *pebbleIter) ok(found bool) bool {
	if !found && i.failed == nil {
		i.failed = i.it.Error()
	}
	return found && i.failed == nil
}

func (i *pebbleIter) seek(k []byte) bool {
	if i.failed != nil {
		return false
	}
	if i.reverse {
		return i.ok(i.it.SeekLT(append(append([]byte(nil), k...), 0))) // last key <= k
	}
	return i.ok(i.it.SeekGE(k))
}

// seekExact positions the iterator at k and reports whether k exists: a
// prefix seek (the whole key under Pebble's default comparer), so files
// whose bloom filter rules k out are skipped, not one per level read.
func (i *pebbleIter) seekExact(k []byte) bool {
	if i.failed != nil {
		return false
	}
	return i.ok(i.it.SeekPrefixGE(k)) && bytes.Equal(i.it.Key(), k)
}

func (i *pebbleIter) next() bool {
	if i.failed != nil {
		return false
	}
	if i.reverse {
		return i.ok(i.it.Prev())
	}
	return i.ok(i.it.Next())
}

func (i *pebbleIter) valid() bool   { return i.it.Valid() }
func (i *pebbleIter) key() []byte   { return i.it.Key() }
func (i *pebbleIter) value() []byte { return i.it.Value() }
func (i *pebbleIter) err() error    { return i.failed }

func (i *pebbleIter) close() error {
	if err := i.it.Close(); i.failed == nil {
		return err
	}
	return i.failed
}

// pebbleLogger routes Pebble's log lines to slog. Fatalf (an invariant
// violation) must not return.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error("pebble fatal: " + msg)
	panic("pebble: " + msg)
}

// ingestDirSuffix names the directory, beside the database's, of files
// being written for ingestion (Open removes what a crash left there).
const ingestDirSuffix = ".ingest"

// ingest writes the runs into two sorted tables (split where their sizes
// balance), in parallel, and has Pebble link both in at once: atomic,
// durable on return, and newer than every key already held.
func (p *pebbleKV) ingest(runs [][]kvEntry) error {
	if err := os.MkdirAll(p.tmp, 0o750); err != nil {
		return err
	}
	total := 0
	for _, r := range runs {
		total += len(r)
	}
	split, acc := len(runs), 0
	for i, r := range runs {
		if acc > 0 && acc+len(r)/2 > total/2 {
			split = i
			break
		}
		acc += len(r)
	}
	var paths []string
	var g errgroup.Group
	for _, part := range [][][]kvEntry{runs[:split], runs[split:]} {
		if len(part) == 0 {
			continue
		}
		p.seq++
		path := filepath.Join(p.tmp, fmt.Sprintf("%06d.sst", p.seq))
		paths = append(paths, path)
		g.Go(func() error { return p.writeTable(path, part) })
	}
	defer func() {
		for _, path := range paths {
			_ = os.Remove(path) // Pebble made its own links
		}
	}()
	if err := g.Wait(); err != nil {
		return err
	}
	if err := p.db.Ingest(context.Background(), paths); err != nil {
		return err
	}
	p.gate.level0(int(p.db.Metrics().Levels[0].Sublevels))
	return nil
}

func (p *pebbleKV) holdCompactions(on bool) { p.gate.hold(on) }

// writeTable writes runs, in order, into a new synced table at path.
func (p *pebbleKV) writeTable(path string, runs [][]kvEntry) error {
	f, err := p.opts.FS.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), p.opts.MakeWriterOptions(6, p.db.TableFormat()))
	for _, run := range runs {
		for _, e := range run {
			if e.del {
				err = w.Delete(e.key)
			} else {
				err = w.Set(e.key, e.value)
			}
			if err != nil {
				_ = w.Close()
				return fmt.Errorf("write table: %w", err)
			}
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// removeHalfCreated removes the Pebble directory path of the store in dir
// when a crash (kill -9, an evicted pod) interrupted its creation, and
// reports whether it did: then path holds files, but no manifest (Pebble
// writes it before the write-ahead log, and keepstate writes nothing
// before Open returns) and no table file, so nothing was ever stored
// there, and Open would fail with "database does not exist". Table files
// without a manifest are a damaged store, not this. The caller holds the
// directory lock.
func removeHalfCreated(dir, path string, log *slog.Logger) (bool, error) {
	desc, err := pebble.Peek(path, vfs.Default)
	if err != nil {
		return false, fmt.Errorf("inspect the store %s: %w", path, err)
	}
	if desc.Exists {
		return false, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return false, fmt.Errorf("inspect %s: %w", path, err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sst") {
			return false, nil
		}
	}
	if err := os.RemoveAll(path); err != nil {
		return false, fmt.Errorf("open docstore %s: remove a half-created store: %w", dir, err)
	}
	log.Warn("docstore: removed a store whose creation a crash interrupted; it is created again and restored from the changelog", "dir", dir)
	return true, nil
}
