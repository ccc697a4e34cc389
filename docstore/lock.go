package docstore

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrLocked means the data directory is in use by another process (or
// another Store in this process); the error names the directory and, when
// known, the other process.
var ErrLocked = errors.New("data directory locked")

// ErrNotStore means the path holds something that is not a keepstate
// docstore; Open refuses it and leaves it unmodified.
var ErrNotStore = errors.New("not a keepstate store")

const (
	lockInfoFile = "keepstate.lock"      // which process holds the directory (the lock is a flock)
	lockPoll     = 20 * time.Millisecond // how often Open retries a locked directory
)

// dirLock is an exclusive flock on the data directory, held from Open to
// Close (released by the kernel if the process dies).
type dirLock struct {
	dir string
	f   *os.File
}

// lockDir takes the lock on dir, waiting up to timeout for another holder.
// It writes nothing (record does, once the store is open).
func lockDir(dir string, timeout time.Duration) (*dirLock, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, lockedError(dir, timeout)
		}
		time.Sleep(lockPoll)
	}
	return &dirLock{dir: dir, f: f}, nil
}

// record writes this process into the lock info file.
func (l *dirLock) record() error {
	host, _ := os.Hostname()
	info := fmt.Sprintf("pid=%d host=%s since=%s\n", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(l.dir, lockInfoFile), []byte(info), 0o644); err != nil {
		return fmt.Errorf("write lock info: %w", err)
	}
	return nil
}

// unlock removes the holder record, then releases the lock (so it never
// removes the next holder's record).
func (l *dirLock) unlock() error {
	err := os.Remove(filepath.Join(l.dir, lockInfoFile))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return cmp.Or(err, l.f.Close())
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
