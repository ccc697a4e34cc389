package docstore

import (
	"log/slog"
	"time"
)

// DefaultLockTimeout is how long Open waits for another process to release
// the data directory before it fails with ErrLocked.
const DefaultLockTimeout = 2 * time.Second

// Default memory bounds of the engine (see WithCacheSize, WithMemtableSize).
const (
	DefaultCacheSize    = 64 << 20
	DefaultMemtableSize = 16 << 20
	// MaxMemtables is how many memtables may exist at once (the one being
	// written and those waiting to be flushed; Pebble stops writes beyond).
	MaxMemtables = 4
	// DefaultWriteCache is the default number of documents the write
	// cache remembers: about 30 MiB of the movie job's documents.
	DefaultWriteCache = 250_000
)

// Option configures Open.
type Option func(*options)

type options struct {
	fsync         bool
	logger        *slog.Logger
	lockTimeout   time.Duration
	cacheBytes    int64
	memtableBytes int64
	noBulk        bool // the bulk-load path off (tests)
	ingestChunk   int
	writeCache    int
	bulkMemory    int64
	diskReserve   int64
	rebuild       bool
	corruptSink   *corruptSink // set by Open
	// openKV opens the engine; nil means Pebble (tests set another).
	openKV func(path string, o options, log *slog.Logger, mustExist bool) (kv, error)
}

func defaults() options {
	return options{fsync: true, lockTimeout: DefaultLockTimeout, cacheBytes: DefaultCacheSize,
		memtableBytes: DefaultMemtableSize, writeCache: DefaultWriteCache, diskReserve: DefaultDiskReserve,
		ingestChunk: defaultIngestChunk}
}

// setIf sets *dst to v when ok.
func setIf[T any](dst *T, v T, ok bool) {
	if ok {
		*dst = v
	}
}

// WithRebuildCorrupt sets what Open does with a store found damaged (by
// an earlier run, see ErrCorrupt, or by Pebble while opening it). On, it
// removes the store's files and opens an empty store, which the engine
// restores from the changelog. Off, the default, it fails with ErrCorrupt
// and leaves the files for inspection.
func WithRebuildCorrupt(on bool) Option { return func(o *options) { o.rebuild = on } }

// WithFsync sets whether every batch is flushed to disk (fsync of the
// write-ahead log) before a table's Apply returns (replay batches excepted,
// see table.Apply). It is on by default. Off, a process crash still loses
// nothing, but a power loss or kernel crash can lose the last batches,
// which the store then restores from the changelog after its checkpoint.
func WithFsync(on bool) Option { return func(o *options) { o.fsync = on } }

// WithLogger sets the logger; nil (the default) discards logs.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithLockTimeout sets how long Open waits for a data directory locked by
// another process before failing with ErrLocked (default
// DefaultLockTimeout). Zero or negative means the default.
func WithLockTimeout(d time.Duration) Option {
	return func(o *options) { setIf(&o.lockTimeout, d, d > 0) }
}

// WithCacheSize bounds the engine's block cache (decompressed blocks
// shared by all reads), in bytes (default DefaultCacheSize). Zero or
// negative means the default.
func WithCacheSize(bytes int64) Option {
	return func(o *options) { setIf(&o.cacheBytes, bytes, bytes > 0) }
}

// WithMemtableSize sets the size of one memtable, in bytes (default
// DefaultMemtableSize): writes are buffered in memory up to this size
// before a flush to a file (and the log replayed after a crash with them).
// Zero or negative means the default.
func WithMemtableSize(bytes int64) Option {
	return func(o *options) { setIf(&o.memtableBytes, bytes, bytes > 0) }
}

// WithWriteCache sets how many documents the write cache of the store's
// tables remembers, all tables together (default DefaultWriteCache; 0
// turns it off; negative means the default). For each key a table has
// read or written (or found absent) it keeps what the next write needs
// and, for small documents, the rest, so that Apply writes that key
// without reading it and Load returns it without searching the store.
// When full it forgets documents at random. A restore into an empty table
// (the bulk load) keeps every document it writes, up to 2M or this limit
// if larger, and shrinks back when it ends.
func WithWriteCache(docs int) Option {
	return func(o *options) { setIf(&o.writeCache, docs, docs >= 0) }
}

// WithBulkMemory bounds the Go heap, in bytes, that a restore into an
// empty table (the bulk load) uses: half for its write cache (about 125
// bytes a document, instead of 2M documents) and half for its buffer of
// documents not yet written out (about 372 bytes a document, in two
// halves, instead of 250k). A bulk load whose cache fills ends, and the
// rest of the restore reads before it writes: slower, not wrong. Zero or
// negative means no bound (the defaults). Set it from the process's memory
// limit, so a restore in a small container is not killed for its memory.
func WithBulkMemory(bytes int64) Option { return func(o *options) { o.bulkMemory = max(bytes, 0) } }

// Sizes the bulk load's structures take per document in Go's heap, as
// measured on the movie job's documents (upper ends: a map's table
// doubles).
const (
	cacheEntryBytes = 125 // one document in the write cache (priorSlab), its key and index included
	// bufferedDocBytes is one document in the load buffer (340, its
	// sources map included) and half of its key's entry in the buffer's
	// map (64; the buffer being written out has dropped its map).
	bufferedDocBytes = 372
	minIngestChunk   = 10_000
	// defaultBulkMax is the most documents the write cache holds while a
	// bulk load pins it, unless WithWriteCache asks for more or
	// WithBulkMemory for less.
	defaultBulkMax = 2_000_000
)

// bulkLimits returns the most documents the pinned write cache holds and
// the load buffer's size that starts an ingestion.
func (o options) bulkLimits() (bulkMax, ingestChunk int) {
	bulkMax, ingestChunk = defaultBulkMax, o.ingestChunk
	if o.bulkMemory > 0 {
		half := o.bulkMemory / 2
		bulkMax = int(min(half/cacheEntryBytes, defaultBulkMax))
		ingestChunk = int(max(min(half/(2*bufferedDocBytes), int64(ingestChunk)), minIngestChunk))
	}
	return max(bulkMax, o.writeCache), ingestChunk
}

// WithDiskReserve sets the free space, in bytes, the store keeps on its
// volume (default DefaultDiskReserve, see diskGuard): with less free,
// every write fails with engine.ErrUnavailable (wrapping syscall.ENOSPC)
// until space is freed. Zero turns the check off; negative means the
// default.
func WithDiskReserve(bytes int64) Option {
	return func(o *options) { setIf(&o.diskReserve, bytes, bytes >= 0) }
}
