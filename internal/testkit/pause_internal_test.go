//go:build linux

package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// procState returns the state letter of process pid (R, S, T, ...) from
// /proc/pid/stat.
func procState(pid int) (string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	i := strings.LastIndexByte(string(stat), ')')
	if f := strings.Fields(string(stat[i+1:])); i >= 0 && len(f) > 0 {
		return f[0], nil
	}
	return "", fmt.Errorf("/proc/%d/stat: %q", pid, stat)
}

// stopped returns nil if p is stopped (SIGSTOP), and otherwise its state.
func stopped(p *Process) error {
	st, err := procState(p.cmd.Process.Pid)
	if err == nil && st != "T" {
		err = fmt.Errorf("state %s, not stopped", st)
	}
	return err
}

// startSleeper starts a child that only sleeps: a victim to pause.
func startSleeper(t *testing.T) *Process {
	t.Helper()
	bin, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("no sleep command: %v", err)
	}
	return StartProcess(t, "sleeper", bin, nil, "300")
}

// TestPausePastSession pauses a sleeping child with stand-in callbacks: the
// partitions "move" once the child is seen stopped, and the abort shows
// (or not) once it runs again. A pause counts only if the count of aborted
// transactions grew after the resume, and the child is resumed either way.
func TestPausePastSession(t *testing.T) {
	defer func(d time.Duration) { pauseAbort = d }(pauseAbort)
	pauseAbort = 500 * time.Millisecond
	for _, tc := range []struct {
		name  string
		abort bool // the resumed victim aborts a transaction
	}{{"abort counts", true}, {"no abort does not count", false}} {
		t.Run(tc.name, func(t *testing.T) {
			victim := startSleeper(t)
			sawStopped, reads := false, 0
			got := PausePastSession(t, Pause{
				Victim: victim, Name: "sleeper", Other: "other",
				TakenOver: func() error {
					err := stopped(victim)
					sawStopped = sawStopped || err == nil
					return err
				},
				Aborted: func() (int64, error) {
					if reads++; reads == 1 {
						if err := stopped(victim); err == nil {
							return 0, errors.New("read before the pause found the victim stopped")
						}
						return 5, nil
					}
					if !sawStopped {
						return 0, errors.New("aborted read before the victim was stopped")
					}
					if stopped(victim) == nil || !tc.abort {
						return 5, nil // no abort while stopped
					}
					return 6, nil
				},
			})
			if !sawStopped {
				t.Errorf("TakenOver never saw the victim stopped")
			}
			if got != tc.abort {
				t.Errorf("PausePastSession = %v, want %v", got, tc.abort)
			}
			if reads < 2 {
				t.Errorf("Aborted read %d times, want once before and at least once after the pause", reads)
			}
			Eventually(t, 5*time.Second, "victim resumed", func() error {
				if stopped(victim) == nil {
					return errors.New("still stopped")
				}
				return nil
			})
			if victim.Exited() {
				t.Errorf("victim exited: %v", victim.Err())
			}
		})
	}
}
