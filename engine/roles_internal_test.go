package engine

import (
	"testing"
	"time"
)

// TestReplayMeter: the rate is taken over at least a second, kept between
// readings closer than that, and per partition.
func TestReplayMeter(t *testing.T) {
	var ms replayMeters
	m := ms.get(3)
	if ms.get(3) != m || ms.get(4) == m {
		t.Fatal("meters are not one per partition")
	}
	t0 := time.Now()
	if got := m.perSecond(t0); got != 0 {
		t.Errorf("first reading: %v, want 0", got)
	}
	m.n.Add(500)
	if got := m.perSecond(t0.Add(400 * time.Millisecond)); got != 0 {
		t.Errorf("after 0.4 s: %v, want 0 (the previous rate: under a second is too short)", got)
	}
	if got := m.perSecond(t0.Add(2 * time.Second)); got != 250 {
		t.Errorf("500 records in 2 s: %v/s, want 250", got)
	}
	m.n.Add(100)
	if got := m.perSecond(t0.Add(2500 * time.Millisecond)); got != 250 {
		t.Errorf("0.5 s later: %v/s, want the previous 250", got)
	}
	if got := m.perSecond(t0.Add(4 * time.Second)); got != 50 {
		t.Errorf("100 records in the next 2 s: %v/s, want 50", got)
	}
}
