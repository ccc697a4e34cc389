package testkit

import (
	"errors"
	"testing"
)

// TestSharedOnce checks that the shared value starts once, stops once, and
// fails later users; and that a stop before any start blocks the start.
func TestSharedOnce(t *testing.T) {
	var s sharedOnce[*int]
	starts, stops := 0, 0
	start := func() (*int, string, error) { starts++; return &starts, "", nil }
	stop := func(*int) error { stops++; return errors.New("stop failed") }
	for range 2 {
		if v, missing, err := s.get(start); v != &starts || missing != "" || err != nil {
			t.Fatalf("get: %v %q %v", v, missing, err)
		}
	}
	stopped := errors.New("stopped")
	for range 2 {
		if err := s.stop(stopped, stop); err == nil || err.Error() != "stop failed" {
			t.Fatalf("stop: got %v, want the stop error", err)
		}
	}
	if v, _, err := s.get(start); v != nil || !errors.Is(err, stopped) {
		t.Fatalf("get after stop: %v %v, want nil and stopped", v, err)
	}
	if starts != 1 || stops != 1 {
		t.Fatalf("%d starts and %d stops, want 1 and 1", starts, stops)
	}

	var never sharedOnce[*int]
	if err := never.stop(stopped, stop); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	if _, _, err := never.get(start); !errors.Is(err, stopped) || starts != 1 {
		t.Fatalf("get after an early stop: %v (%d starts), want stopped and no start", err, starts)
	}

	var missing sharedOnce[*int]
	missing.get(func() (*int, string, error) { return nil, "no java", nil })
	_ = missing.stop(stopped, stop)
	if _, why, err := missing.get(start); why != "no java" || err != nil || stops != 1 {
		t.Fatalf("missing after stop: %q %v (%d stops), want still missing", why, err, stops)
	}
}
