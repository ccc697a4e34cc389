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
	deadline := time.Now().Add(timeout)
	interval := 10 * time.Millisecond
	var last error
	for {
		if last = cond(); last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v: %v", msg, timeout, last)
		}
		time.Sleep(interval)
		if interval < 200*time.Millisecond {
			interval *= 2
		}
	}
}
