package testkit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// FreeAddr returns a loopback host:port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatalf("testkit: free port: %v", err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

// Process is a child process of a test (a keepstate instance, say) whose
// output goes to a log file that is printed when the test fails.
type Process struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // the exit error, set before done is closed
}

// StartProcess starts bin with args and extra environment variables. It
// is killed at the latest when the test ends.
func StartProcess(t testing.TB, name, bin string, env []string, args ...string) *Process {
	t.Helper()
	dir := t.TempDir()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), childRaceEnv(dir)...), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("testkit: start %s: %v", name, err)
	}
	p := &Process{t: t, name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		checkChildRaces(t, name, dir)
		keepLog(logPath, fmt.Sprintf("%s-%s-%d.log", strings.ReplaceAll(t.Name(), "/", "_"), name, p.cmd.Process.Pid))
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("output of %s (tail):\n%s", name, b)
		}
	})
	return p
}

// keepLog copies the whole log file src to KEEPSTATE_TEST_LOG_DIR/name,
// when that is set, for debugging.
func keepLog(src, name string) {
	if keep := os.Getenv("KEEPSTATE_TEST_LOG_DIR"); keep != "" {
		if b, err := os.ReadFile(src); err == nil {
			_ = os.MkdirAll(keep, 0o755)
			_ = os.WriteFile(filepath.Join(keep, name), b, 0o644)
		}
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits up to timeout for a clean exit; it returns
// the exit error (nil for exit code 0).
func (p *Process) Stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%s did not stop within %v after SIGTERM", p.name, timeout)
	}
	return p.Err()
}

// Wait waits for the process to exit by itself, up to timeout.
func (p *Process) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.Err()
	case <-time.After(timeout):
		return errors.New(p.name + " still running")
	}
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit error once it ended.
func (p *Process) Err() error {
	if p.Exited() {
		return p.err
	}
	return nil
}

// Output returns what the process wrote so far.
func (p *Process) Output() string {
	b, _ := os.ReadFile(p.log)
	return string(bytes.TrimSpace(b))
}
