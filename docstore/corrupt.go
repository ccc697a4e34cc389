package docstore

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/keepstate/keepstate/engine"
)

// ErrCorrupt means a file of the store failed its checksum (a damaged disk
// or a bad copy). It is engine.ErrCorrupt, so the engine stops on it
// instead of retrying. Once a Store has met it, it is condemned: every
// later call fails with the same error, and a marker file tells the next
// Open. Recovery is to reopen with WithRebuildCorrupt (or move the
// directory away): the state is rebuilt from the changelog.
var ErrCorrupt = engine.ErrCorrupt

// corruptMarker is the file in the data directory that records that a
// run found the store damaged: its text is when and what.
const corruptMarker = "CORRUPT"

// corruptSink hands the corruption Pebble reports from its own goroutines
// to the Store, once open has set it.
type corruptSink struct{ s atomic.Pointer[Store] }

// report condemns the store with cause; before the store exists it does
// nothing (Open's own errors report what Pebble found while opening).
func (c *corruptSink) report(cause error) {
	if c == nil {
		return
	}
	if s := c.s.Load(); s != nil {
		s.condemn(s.corruptErr(cause))
	}
}

// corrupt wraps err in ErrCorrupt (corruptErr) when it reports on-disk
// corruption, and condemns the store; other errors are returned as is.
func (s *Store) corrupt(err error) error {
	if err == nil || errors.Is(err, ErrCorrupt) || !pebble.IsCorruptionError(err) {
		return err
	}
	err = s.corruptErr(err)
	s.condemn(err)
	return err
}

// corruptErr wraps cause in ErrCorrupt, naming the directory and the way out.
func (s *Store) corruptErr(cause error) error {
	return fmt.Errorf("docstore %s: %w: a file failed its checksum; the state is rebuilt from the changelog once the store is reopened with the rebuild option (or the directory is moved away): %w",
		s.dir, ErrCorrupt, cause)
}

// condemn makes every later call of s fail with err (wrapping ErrCorrupt)
// and writes the marker for the next Open; only the first call counts.
func (s *Store) condemn(err error) {
	if !s.condemned.CompareAndSwap(nil, &err) {
		return
	}
	close(s.condemnedCh)
	if werr := writeCorruptMarker(s.dir, err); werr != nil {
		s.log.Error("docstore: could not record the corruption for the next start", "dir", s.dir, "err", werr)
	}
	s.log.Error("docstore: store corrupt; every call fails from now on, and the next open with the rebuild option wipes it so the state is restored from the changelog",
		"dir", s.dir, "err", err)
}

// Condemned returns a channel closed once the store has met corruption
// (then every call fails with CondemnedErr), so that whoever runs the
// store can stop and rebuild even when idle. Safe for concurrent use.
func (s *Store) Condemned() <-chan struct{} { return s.condemnedCh }

// CondemnedErr returns the error (wrapping ErrCorrupt) every call of a
// condemned store fails with, or nil. Safe for concurrent use.
func (s *Store) CondemnedErr() error {
	if p := s.condemned.Load(); p != nil {
		return *p
	}
	return nil
}

// writeCorruptMarker writes (synced) the marker of dir saying why.
func writeCorruptMarker(dir string, why error) error {
	path := filepath.Join(dir, corruptMarker)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %v\n", time.Now().UTC().Format(time.RFC3339), why)
	if err == nil {
		err = f.Sync()
	}
	if err = cmp.Or(err, f.Close()); err != nil {
		return err
	}
	return syncDir(dir)
}

// readCorruptMarker returns the marker's text, and whether dir has one.
func readCorruptMarker(dir string) (string, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, corruptMarker))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("read %s: %w", corruptMarker, err)
	}
	return strings.TrimSpace(string(b)), true, nil
}

// wipeCorrupt removes the Pebble database of dir, then its marker (a crash
// between leaves a marker over no store, which the next open clears).
func wipeCorrupt(dir string) error {
	err := os.RemoveAll(filepath.Join(dir, storeDir))
	if err = cmp.Or(err, syncDir(dir)); err == nil {
		if err = os.Remove(filepath.Join(dir, corruptMarker)); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("wipe the corrupt store of %s: %w", dir, err)
	}
	return syncDir(dir)
}

// corruptionListener logs on-disk corruption Pebble finds and condemns the
// store (through sink). Pebble's default calls Fatalf, which would stop
// the process from whatever goroutine read the damaged block; instead the
// read fails with a corruption error, which the store returns as ErrCorrupt.
func corruptionListener(log *slog.Logger, sink *corruptSink) *pebble.EventListener {
	return &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
		log.Error("docstore: on-disk corruption: a file failed its checksum",
			"path", info.Path, "details", info.Details)
		sink.report(fmt.Errorf("%s: %w", info.Path, info.Details))
	}}
}
