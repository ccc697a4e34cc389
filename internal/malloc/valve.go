package malloc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Why a valve: glibc's free gives memory back to the system only from the
// top of an arena. Pebble's block cache frees and allocates blocks of
// many sizes all the time, so its arenas fill with free holes that stay
// resident: on a uniform 1M-movie run under a 300 MiB limit the arenas
// held 110–129 MiB of which 76–94 MiB free, and the process peaked at
// 298–316 MiB where its plan counted on 176 MiB outside Go's heap
// (docs/benchmarks.md, "Memory"). Trimming
// (madvise of the free pages) takes them out of the resident set; the
// pages are faulted back in when reused.

// Valve trims the C allocator (Trim) whenever the process's resident
// memory reaches Bound, at most once per MinGap, looking every Every.
// Trimming only under pressure leaves a process well under its bound
// without the cost (the collapsed pages are faulted in again when reused).
type Valve struct {
	// Bound holds the resident bytes at or above which the valve trims.
	// It is read at every look, so a limit that moves (an elastic memory
	// target that rose) takes the valve along; nil or not positive, the
	// valve does not trim.
	Bound *atomic.Int64
	// Every is how often the valve reads the resident memory (default
	// 200 ms); MinGap the least time between two trims (default 1 s),
	// which bounds what a process whose memory is all in use pays.
	Every, MinGap time.Duration
	// Log gets a debug record per trim; nil discards them.
	Log *slog.Logger
}

// Run runs the valve until ctx ends. It returns at once when Pebble's
// memory is not the C allocator's (OffHeap false) or the resident memory
// cannot be read (no /proc: not Linux).
func (v Valve) Run(ctx context.Context) {
	if !OffHeap || v.Bound == nil {
		return
	}
	if _, err := Resident(); err != nil {
		return
	}
	every, gap := v.Every, v.MinGap
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	if gap <= 0 {
		gap = time.Second
	}
	log := v.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			bound := v.Bound.Load()
			if bound <= 0 {
				continue
			}
			rss, err := Resident()
			if err != nil || !shouldTrim(rss, bound, now, last, gap) {
				continue
			}
			last = now
			Trim()
			after, _ := Resident()
			log.Debug("C allocator trimmed", "resident_mib", rss>>20, "after_mib", after>>20, "bound_mib", bound>>20, "took", time.Since(now))
		}
	}
}

// Resident returns the process's resident memory in bytes, read from
// /proc/self/statm (Linux only; an error elsewhere).
func Resident() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, fmt.Errorf("read resident memory: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("read resident memory: unexpected /proc/self/statm %q", b)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read resident memory: %w", err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// shouldTrim reports whether a valve with bound that last trimmed at last
// trims now, with the process at rss resident bytes: at or over the
// bound, and not within gap of the last trim.
func shouldTrim(rss, bound int64, now, last time.Time, gap time.Duration) bool {
	return rss >= bound && now.Sub(last) >= gap
}
