//go:build unix

package testkit

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// Pause describes one pause of PausePastSession: which process to pause,
// and how to tell that its partitions moved and that it aborted a
// transaction. The callbacks differ between the tests (their instances
// report through different APIs); testkit cannot import engine, so they
// return plain values.
type Pause struct {
	// Victim is the process to pause, named Name in messages.
	Victim *Process
	Name   string
	// Other names the instance that must take the victim's partitions.
	Other string
	// TakenOver returns nil once Other runs every partition of the group
	// (the victim's session timed out and its partitions moved), and
	// otherwise an error saying what Other runs.
	TakenOver func() error
	// Aborted returns the victim's count of aborted transactions
	// (engine.Stats.TransactionsAborted).
	Aborted func() (int64, error)
}

// The bounds of PausePastSession's waits for the take-over and for the
// resumed victim's abort (variables for its own test).
var (
	pauseTakeOver = 60 * time.Second
	pauseAbort    = 30 * time.Second
)

// PausePastSession pauses p.Victim past its consumer-group session timeout
// and reports whether the pause struck it holding unflushed state. It reads
// p.Aborted, sends the victim SIGSTOP, waits up to 60s until p.TakenOver
// returns nil, sends SIGCONT, and returns true once p.Aborted exceeds the
// count it read first within 30s: the victim woke up as a zombie in the
// middle of a transaction, and that transaction was aborted.
//
// Otherwise (nothing to flush, or no abort within 30s) it logs why the pause
// did not count and returns false; the caller may pause again. It fails the
// test if the first read of p.Aborted fails, the victim cannot be
// signalled, or p.TakenOver does not hold within 60s; the victim is resumed
// even then. Call it from the test goroutine; nothing else may signal, stop
// or restart the victim until it returns. It calls p.TakenOver and
// p.Aborted one at a time from the calling goroutine; they report through
// their error and must not fail the test.
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
