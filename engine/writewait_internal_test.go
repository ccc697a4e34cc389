package engine

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestWriteWaitsStuck: a write in flight longer than stuckAfter is
// reported, naming it and the last restart's cause; ended writes and
// young ones are not.
func TestWriteWaitsStuck(t *testing.T) {
	w := writeWaits{stuckAfter: time.Hour}
	end := w.begin("partition 1")
	if err := w.stuck(nil); err != nil {
		t.Fatalf("young write reported: %v", err)
	}
	for id, ww := range w.since { // the write began two hours ago
		ww.since = ww.since.Add(-2 * time.Hour)
		w.since[id] = ww
	}
	err := w.stuck(errors.New("NOT_ENOUGH_REPLICAS"))
	if err == nil || !strings.Contains(err.Error(), "partition 1") || !strings.Contains(err.Error(), "NOT_ENOUGH_REPLICAS") {
		t.Fatalf("stuck write: got %v, want an error naming partition 1 and the cause", err)
	}
	end()
	if err := w.stuck(nil); err != nil {
		t.Fatalf("ended write reported: %v", err)
	}
}
