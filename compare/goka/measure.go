package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"
)

// child is a processor running as a child process, so that it can be
// killed with SIGKILL like a crashed pod.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startChild starts bin with args, appending its output to logPath. The
// child gets SIGKILL if this process dies first.
func startChild(logPath, bin string, args ...string) (*child, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "\n===== %s start: %s %v\n", time.Now().Format(time.RFC3339Nano), bin, args)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

// kill sends SIGKILL (kill -9) and waits until the process is gone.
func (c *child) kill() {
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// exited reports whether the child has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// probe is one lookup endpoint of a system: a URL answering 200 with a
// JSON object that has a "count" field.
type probe struct {
	label string
	url   string
}

var httpClient = &http.Client{Timeout: time.Second}

// lookup GETs url and returns the status and the "count" of a 200 answer.
func lookup(ctx context.Context, url string) (int, int64) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, 0
	}
	var v struct {
		Count int64 `json:"count"`
	}
	if json.Unmarshal(body, &v) != nil {
		return 0, 0
	}
	return resp.StatusCode, v.Count
}

// waitCount polls url until its count is want, or the timeout ends.
func waitCount(url string, want int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var code int
	var got int64
	for time.Now().Before(deadline) {
		code, got = lookup(context.Background(), url)
		if code == http.StatusOK && got == want {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("%s: want count %d within %s, last status %d count %d", url, want, timeout, code, got)
}

// errExited means a child process ended while it was waited for.
var errExited = errors.New("child process exited")

// waitOK polls url until it answers 200, the child c exits or the timeout
// ends.
func waitOK(c *child, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if code, _ := lookup(context.Background(), url); code == http.StatusOK {
			return nil
		}
		if c.exited() {
			return fmt.Errorf("%s: %w", url, errExited)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s: no 200 within %s", url, timeout)
}

// sample is one poll of a probe, at an offset from the restart.
type sample struct {
	at    time.Duration
	ok    bool
	count int64
}

// probeResult is what one probe saw in one trial; durations are from the
// restart, negative when the event was not seen before the trial timeout.
type probeResult struct {
	firstOK  time.Duration // first 200
	steadyOK time.Duration // 200 from then on, until the end of the trial
	newSeen  time.Duration // first 200 with the rating produced after the restart counted
	maxCount int64
	polls    int
}

// watch polls every probe every interval from t0 until each has seen the
// count want, then tail longer (to check the answers stay up), or until
// timeout. It returns one result per probe.
func watch(probes []probe, t0 time.Time, want int64, interval, tail, timeout time.Duration) []probeResult {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	samples := make([][]sample, len(probes))
	seen := make(chan int, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reported := false
			for ctx.Err() == nil {
				code, n := lookup(ctx, p.url)
				if ctx.Err() != nil {
					return
				}
				s := sample{at: time.Since(t0), ok: code == http.StatusOK, count: n}
				samples[i] = append(samples[i], s)
				if s.ok && n >= want && !reported {
					reported = true
					seen <- i
				}
				time.Sleep(interval)
			}
		}()
	}
	for n := 0; n < len(probes); n++ {
		select {
		case <-seen:
		case <-ctx.Done():
			n = len(probes)
		}
	}
	select {
	case <-time.After(tail):
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	out := make([]probeResult, len(probes))
	for i, ss := range samples {
		out[i] = summarize(ss, want)
	}
	return out
}

func summarize(ss []sample, want int64) probeResult {
	r := probeResult{firstOK: -1, steadyOK: -1, newSeen: -1, polls: len(ss)}
	for _, s := range ss {
		if s.ok && r.firstOK < 0 {
			r.firstOK = s.at
		}
		if s.ok && s.count >= want && r.newSeen < 0 {
			r.newSeen = s.at
		}
		if s.ok {
			r.maxCount = max(r.maxCount, s.count)
			if r.steadyOK < 0 {
				r.steadyOK = s.at
			}
		} else {
			r.steadyOK = -1
		}
	}
	return r
}

// stats is median, min and max of durations; n counts the observed ones.
type stats struct {
	med, min, max time.Duration
	n, of         int
}

func summarizeDurations(ds []time.Duration) stats {
	var ok []time.Duration
	for _, d := range ds {
		if d >= 0 {
			ok = append(ok, d)
		}
	}
	s := stats{n: len(ok), of: len(ds)}
	if len(ok) == 0 {
		return s
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i] < ok[j] })
	s.min, s.max = ok[0], ok[len(ok)-1]
	if len(ok)%2 == 1 {
		s.med = ok[len(ok)/2]
	} else {
		s.med = (ok[len(ok)/2-1] + ok[len(ok)/2]) / 2
	}
	return s
}

func (s stats) String() string {
	if s.n == 0 {
		return "not seen"
	}
	txt := fmt.Sprintf("%s (%s–%s)", secs(s.med), secs(s.min), secs(s.max))
	if s.n < s.of {
		txt += fmt.Sprintf(" [%d/%d seen]", s.n, s.of)
	}
	return txt
}

func secs(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}
