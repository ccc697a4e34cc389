package testkit

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

// givenPorts are the ports freePort returned: the kernel may hand a
// just-closed port out again at once (two children of one test once got the
// same API port).
var givenPorts = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// freePort returns a loopback port that was free a moment ago and that it
// has not returned before in this process.
func freePort() (int, error) {
	givenPorts.Lock()
	defer givenPorts.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !givenPorts.m[p] {
			givenPorts.m[p] = true
			return p, nil
		}
	}
	return 0, errors.New("find a free port: every port the kernel offered was given out before")
}

// child is a started command; done is closed once err holds its exit.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startChild starts cmd.
func startChild(cmd *exec.Cmd) (*child, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// Exited reports whether the process has ended.
func (c *child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// wait reports whether the child ends within timeout.
func (c *child) wait(timeout time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (c *child) Kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// Process is a child process of a test (a keepstate instance, say) whose
// output goes to a log file, printed when the test fails.
type Process struct {
	*child
	name, log string
}

// StartProcess starts bin with args and extra environment variables, to be
// killed at the latest when the test ends.
func StartProcess(t testing.TB, name, bin string, env []string, args ...string) *Process {
	t.Helper()
	dir := t.TempDir()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	defer f.Close() // the child keeps its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), childRaceEnv(dir)...), env...)
	cmd.Stdout, cmd.Stderr = f, f
	c, err := startChild(cmd)
	if err != nil {
		t.Fatalf("testkit: start %s: %v", name, err)
	}
	p := &Process{child: c, name: name, log: logPath}
	t.Cleanup(func() {
		p.Kill()
		checkChildRaces(t, name, dir)
		keepLog(logPath, fmt.Sprintf("%s-%s-%d.log", strings.ReplaceAll(t.Name(), "/", "_"), name, cmd.Process.Pid))
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("output of %s (tail):\n%s", name, b[max(0, len(b)-20000):])
		}
	})
	return p
}

// keepLog copies log file src to KEEPSTATE_TEST_LOG_DIR/name, if set.
func keepLog(src, name string) {
	if keep := os.Getenv("KEEPSTATE_TEST_LOG_DIR"); keep != "" {
		if b, err := os.ReadFile(src); err == nil {
			_ = os.MkdirAll(keep, 0o755)
			_ = os.WriteFile(filepath.Join(keep, name), b, 0o644)
		}
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits up to timeout for a clean exit, returning
// the exit error.
func (p *Process) Stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if !p.wait(timeout) {
		p.Kill()
		return fmt.Errorf("%s did not stop within %v after SIGTERM", p.name, timeout)
	}
	return p.Err()
}

// Wait waits for the process to exit by itself, up to timeout.
func (p *Process) Wait(timeout time.Duration) error {
	if !p.wait(timeout) {
		return errors.New(p.name + " still running")
	}
	return p.Err()
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
