//go:build unix

package testkit

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// Pause describes one pause of PausePastSession. The callbacks differ
// between tests and return plain values (testkit cannot import engine).
type Pause struct {
	Victim *Process // the process to pause
	Name   string   // the victim's name in messages
	Other  string   // the instance that must take the victim's partitions
	// TakenOver returns nil once Other runs every partition of the group
	// (the victim's session timed out), and otherwise what Other runs.
	TakenOver func() error
	// Aborted returns the victim's engine.Stats.TransactionsAborted.
	Aborted func() (int64, error)
}

// The bounds of PausePastSession's waits for the take-over and for the
// resumed victim's abort (variables for its own test).
var (
	pauseTakeOver = 60 * time.Second
	pauseAbort    = 30 * time.Second
)

// PausePastSession pauses p.Victim (SIGSTOP) past its consumer-group
// session timeout, until p.TakenOver holds (within 60s), resumes it, and
// reports whether p.Aborted grew within 30s: the victim woke up a zombie
// holding an open transaction, which was aborted. Otherwise it logs why
// the pause did not count, and the caller may pause again. It fails the
// test if the first p.Aborted read or a signal fails, or p.TakenOver does
// not hold in time; the victim is resumed either way. Call it from the
// test goroutine, with nothing else signalling or restarting the victim;
// the callbacks run one at a time on it and must not fail the test.
func PausePastSession(t testing.TB, p Pause) bool {
	t.Helper()
	before, err := p.Aborted()
	if err != nil {
		t.Fatalf("aborted transactions of %s: %v", p.Name, err)
	}
	if err := p.Victim.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", p.Name, err)
	}
	stopped := true
	defer func() {
		// A failed test leaves no stopped process behind.
		if stopped {
			_ = p.Victim.Signal(syscall.SIGCONT)
		}
	}()
	Eventually(t, pauseTakeOver, p.Other+" runs every partition", p.TakenOver)
	stopped = false
	if err := p.Victim.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT %s: %v", p.Name, err)
	}
	err = Poll(pauseAbort, func() error {
		n, err := p.Aborted()
		if err == nil && n <= before {
			err = fmt.Errorf("%d aborted transactions, as before the pause", n)
		}
		return err
	})
	if err != nil {
		t.Logf("pause of %s did not count: no aborted transaction within %v: %v", p.Name, pauseAbort, err)
	}
	return err == nil
}
