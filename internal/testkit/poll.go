package testkit

import (
	"testing"
	"time"
)

// Eventually calls cond every interval until it returns true or timeout
// passes, then fails the test with msg and the last condition error. It must
// be called from the test goroutine.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() error) {
	t.Helper()
	if last := Poll(timeout, cond); last != nil {
		t.Fatalf("%s: not true after %v: %v", msg, timeout, last)
	}
}

// Poll calls cond, at growing intervals up to 200ms, until it returns nil
// or timeout passes, and returns its last error: Eventually for a condition
// that may fairly never hold, safe to call from any goroutine.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	interval := 10 * time.Millisecond
	for {
		last := cond()
		if last == nil || time.Now().After(deadline) {
			return last
		}
		time.Sleep(interval) // polling interval, not synchronisation
		interval = min(2*interval, 320*time.Millisecond)
	}
}
