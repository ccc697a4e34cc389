package testkit

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: a log sink that
// goroutines write while the test reads it. The zero value is ready.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Logger returns a debug-level text logger writing to s.
func (s *SyncBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Logger returns a debug-level logger whose output is printed, under name,
// when t fails.
func Logger(t testing.TB, name string) *slog.Logger {
	buf := &SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", name, buf.String())
		}
	})
	return buf.Logger()
}
