package boltstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrLocked means the data directory is in use by another process (or
// another Store in this process). The error names the directory and, when
// known, the other process.
var ErrLocked = errors.New("data directory locked")

// ErrNotStore means the path holds something that is not a keepstate
// docstore; Open refuses it and leaves it unmodified.
var ErrNotStore = errors.New("not a keepstate store")

// lockInfoFile records which process holds the directory, for the error a
// second process reports. The lock itself is bbolt's flock on dbFile.
const lockInfoFile = "keepstate.lock"

// writeLockInfo records this process as the holder; it is called while the
// flock is held.
func writeLockInfo(dir string) error {
	host, _ := os.Hostname()
	info := fmt.Sprintf("pid=%d host=%s since=%s\n", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	return os.WriteFile(filepath.Join(dir, lockInfoFile), []byte(info), 0o644)
}

// removeLockInfo removes the record; it is called before the flock is
// released, so it never removes the next holder's record.
func removeLockInfo(dir string) error {
	err := os.Remove(filepath.Join(dir, lockInfoFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// lockedError builds the ErrLocked error for dir after waiting timeout.
func lockedError(dir string, timeout time.Duration) error {
	holder := "another process (holder unknown)"
	if b, err := os.ReadFile(filepath.Join(dir, lockInfoFile)); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			holder = "another process (" + s + ")"
		}
	}
	return fmt.Errorf("%w: %s is in use by %s; gave up after %v (is another keepstate running with this --data-dir?)",
		ErrLocked, dir, holder, timeout)
}
