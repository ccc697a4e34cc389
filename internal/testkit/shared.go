package testkit

import (
	"sync"
	"testing"
)

// sharedOnce starts a T shared by the test process at most once, on first
// use, and stops it at most once. Safe for concurrent use.
type sharedOnce[T any] struct {
	once, stopOnce sync.Once
	mu             sync.Mutex // guards the fields below once start has run
	v              T
	started        bool   // v runs and was not stopped
	missing        string // why it cannot run here, for Missing
	err            error  // why it failed to start, or that it was stopped
	stopErr        error
}

// get runs start on the first call and returns the value, why it cannot
// run here, or why it failed to start (or that it was stopped).
func (s *sharedOnce[T]) get(start func() (T, string, error)) (T, string, error) {
	s.once.Do(func() {
		s.v, s.missing, s.err = start()
		s.started = s.missing == "" && s.err == nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v, s.missing, s.err
}

// use is get for a test: it calls Missing for service when that cannot run
// here, and fails t when it did not start.
func (s *sharedOnce[T]) use(t testing.TB, service string, start func() (T, string, error)) T {
	t.Helper()
	v, missing, err := s.get(start)
	if missing != "" {
		Missing(t, service, missing)
	}
	if err != nil {
		t.Fatalf("testkit: start %s: %v", service, err)
	}
	return v
}

// stop stops a started value with stop, once; later get calls return
// stopped (unless the value cannot run here at all).
func (s *sharedOnce[T]) stop(stopped error, stop func(T) error) error {
	s.stopOnce.Do(func() {
		// Block a start that has not begun; wait for one that runs.
		s.once.Do(func() {})
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.started {
			s.stopErr = stop(s.v)
		}
		var zero T
		s.v, s.started = zero, false
		if s.missing == "" {
			s.err = stopped
		}
	})
	return s.stopErr
}
