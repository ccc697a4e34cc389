//go:build cgo && linux

package malloc

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keepstate/keepstate/internal/testkit"
)

// holeMiB is how much free space the tests leave in the arenas.
const holeMiB = 64

// TestTrimReturnsHoles checks that Trim takes the free holes inside the
// arenas out of the resident set: 64 MiB of 64 KiB blocks, 15 of every
// 16 freed, stay resident after free (glibc returns only an arena's top)
// and go after Trim.
func TestTrimReturnsHoles(t *testing.T) {
	if err := Tune(); err != nil {
		t.Fatal(err)
	}
	release := holes(holeMiB<<4, 64<<10, 16)
	defer release()
	before := resident(t)
	if !Trim() {
		t.Errorf("Trim() = false; want true (there were %d MiB of holes)", holeMiB)
	}
	after := resident(t)
	if got, want := (before-after)>>20, int64(holeMiB/2); got < want {
		t.Errorf("Trim released %d MiB (resident %d → %d MiB); want at least %d", got, before>>20, after>>20, want)
	}
}

// TestValveTrimsAtItsBound checks that a running Valve trims once the
// resident memory reaches its bound, and logs what it released.
func TestValveTrimsAtItsBound(t *testing.T) {
	if err := Tune(); err != nil {
		t.Fatal(err)
	}
	release := holes(holeMiB<<4, 64<<10, 16)
	defer release()
	before := resident(t)
	logs := &testkit.SyncBuffer{}
	// The valve starts off (bound 0) and is opened while it runs: its
	// bound is read at every look, as a memory target that rises needs.
	v := Valve{Bound: new(atomic.Int64), Every: 5 * time.Millisecond, MinGap: time.Hour, Log: logs.Logger()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.Run(ctx) }()
	defer func() { cancel(); <-done }()
	v.Bound.Store(before - 1<<20)
	testkit.Eventually(t, 10*time.Second, "the valve trims", func() error {
		if !strings.Contains(logs.String(), "C allocator trimmed") {
			return errors.New("no trim logged")
		}
		return nil
	})
	if got, want := (before-resident(t))>>20, int64(holeMiB/2); got < want {
		t.Errorf("the valve released %d MiB; want at least %d", got, want)
	}
}

// TestValveDecision checks when the valve trims: at or over its bound,
// and not again within its gap.
func TestValveDecision(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name       string
		rss, bound int64
		last       time.Time
		want       bool
	}{
		{"under the bound", 99, 100, time.Time{}, false},
		{"at the bound", 100, 100, time.Time{}, true},
		{"over, trimmed a while ago", 150, 100, now.Add(-2 * time.Second), true},
		{"over, trimmed within the gap", 150, 100, now.Add(-500 * time.Millisecond), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shouldTrim(tc.rss, tc.bound, now, tc.last, time.Second); got != tc.want {
				t.Errorf("shouldTrim(%d, %d, last %s ago) = %v; want %v", tc.rss, tc.bound, now.Sub(tc.last), got, tc.want)
			}
		})
	}
}

func resident(t *testing.T) int64 {
	t.Helper()
	n, err := Resident()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
