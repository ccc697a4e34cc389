package engine

import (
	"errors"
	"testing"
	"time"
)

func TestRestartLogFailsOnALoop(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name    string
		at      []time.Duration // restarts, relative to base
		check   time.Duration   // when failing() is asked
		failing bool
	}{
		{"no restart", nil, 0, false},
		{"two restarts in a minute", []time.Duration{0, 10 * time.Second}, 20 * time.Second, false},
		{"three restarts in a minute", []time.Duration{0, 10 * time.Second, 20 * time.Second}, 30 * time.Second, true},
		{"three restarts, the first one too old", []time.Duration{0, 50 * time.Second, 70 * time.Second}, 75 * time.Second, false},
		{"a loop that stopped a minute ago", []time.Duration{0, time.Second, 2 * time.Second}, 3 * time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var now time.Time
			r := restartLog{now: func() time.Time { return now }}
			cause := errors.New("boom")
			for _, d := range tt.at {
				now = base.Add(d)
				r.note(cause)
			}
			now = base.Add(tt.check)
			err := r.failing()
			if got := err != nil; got != tt.failing {
				t.Fatalf("failing() = %v, want failing %v", err, tt.failing)
			}
		})
	}
}
