package boltstore

import (
	"log/slog"
	"time"
)

// DefaultLockTimeout is how long Open waits for another process to release
// the data directory before it fails with ErrLocked.
const DefaultLockTimeout = 2 * time.Second

// Option configures Open.
type Option func(*options)

type options struct {
	fsync         bool
	logger        *slog.Logger
	lockTimeout   time.Duration
	cloverUpdates bool // withCloverUpdates
}

func defaults() options {
	return options{fsync: true, lockTimeout: DefaultLockTimeout}
}

// WithFsync sets whether every batch is flushed to disk (fsync) before Apply
// returns. It is on by default.
//
// Risk when off: Apply returns once the batch is in the operating system's
// page cache. A process crash (kill -9, panic, OOM kill) still loses
// nothing, but a power loss or kernel crash can lose the last batches and
// may leave the file corrupt; the store must then be deleted and rebuilt
// from the changelog (keepstate does this when the store is new). Off made
// 1000-document batches about twice as fast in docs/benchmarks.md.
func WithFsync(on bool) Option { return func(o *options) { o.fsync = on } }

// WithLogger sets the logger; nil (the default) discards logs.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithLockTimeout sets how long Open waits for a data directory locked by
// another process before failing with ErrLocked (default
// DefaultLockTimeout). Zero or negative means the default.
func WithLockTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.lockTimeout = d
		}
	}
}
