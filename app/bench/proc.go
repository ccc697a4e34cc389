package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Child is a process under test (keepstate run, a goka or Kafka Streams
// app) started by a benchmark. Its output goes to a log file. Methods are
// safe for concurrent use.
type Child struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	Started time.Time // when the process was started
}

// StartChild starts bin with args, its stdout and stderr appended to
// logPath.
func StartChild(logPath, bin string, args ...string) (*Child, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "\n=== %s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	c := &Child{cmd: cmd, logPath: logPath, done: make(chan struct{}), Started: time.Now()}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

// Exited reports whether the child has ended.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL and waits until the child is gone.
func (c *Child) Kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// Stop sends SIGTERM, and SIGKILL if the child is still there after
// grace; it waits until the child is gone.
func (c *Child) Stop(grace time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		c.Kill()
	}
}

// Failed wraps err with the child's state and the last 25 lines of its log.
func (c *Child) Failed(err error) error {
	state := "still running"
	if c.Exited() {
		state = "exited: " + c.cmd.ProcessState.String()
	}
	raw, _ := os.ReadFile(c.logPath)
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	tail := strings.Join(lines[max(0, len(lines)-25):], "\n")
	return fmt.Errorf("%w; child %s; last lines of %s:\n%s", err, state, c.logPath, tail)
}

// ProcUsage is what a process used so far, read from /proc.
type ProcUsage struct {
	CPU     time.Duration // user + system time
	PeakRSS int64         // bytes (VmHWM)
	RSS     int64         // bytes, now (VmRSS)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// Usage reads the child's CPU time and resident set size from /proc (Linux
// only); it fails once the child has exited.
func (c *Child) Usage() (ProcUsage, error) { return ReadProcUsage(c.cmd.Process.Pid) }

// ReadProcUsage reads pid's CPU time and resident set size from /proc.
func ReadProcUsage(pid int) (ProcUsage, error) {
	var u ProcUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("cpu time of process %d (needs Linux /proc): %w", pid, err)
	}
	// Fields after the command name (which may contain spaces) in parens.
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("cpu time of process %d: short /proc stat %q", pid, stat)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return u, fmt.Errorf("cpu time of process %d: %w", pid, err)
	}
	u.CPU = time.Duration(utime+stime) * time.Second / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, fmt.Errorf("rss of process %d: %w", pid, err)
	}
	fields := map[string]*int64{"VmHWM": &u.PeakRSS, "VmRSS": &u.RSS}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if dst := fields[k]; dst != nil {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return u, fmt.Errorf("rss of process %d: %s: %w", pid, line, err)
			}
			*dst = kb << 10
		}
	}
	return u, nil
}

// profilerStartTimeout is how long CollectCPUProfile retries a refused
// connection: a child process starts its listeners a little after exec.
const profilerStartTimeout = 15 * time.Second

// ErrNoProfiler means the process does not serve /debug/pprof.
var ErrNoProfiler = errors.New("no /debug/pprof endpoint")

// CollectCPUProfile fetches a CPU profile of d from a Go process serving
// net/http/pprof at base (http://host:port) and writes it to path. It
// returns ErrNoProfiler when base does not serve /debug/pprof.
func CollectCPUProfile(ctx context.Context, base string, d time.Duration, path string) error {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), nil)
	if err != nil {
		return err
	}
	// A child just started may not listen yet: retry a refused connection
	// for a while (polling, not a fixed sleep).
	client := &http.Client{Timeout: d + 30*time.Second}
	deadline := time.Now().Add(profilerStartTimeout)
	var resp *http.Response
	for {
		resp, err = client.Do(req)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("cpu profile from %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w at %s", ErrNoProfiler, base)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("cpu profile from %s: status %d: %s", base, resp.StatusCode, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("cpu profile from %s: %w", base, err)
	}
	return f.Close()
}
