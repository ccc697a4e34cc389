package engine

import (
	"errors"
	"testing"
	"time"
)

// TestGroupDialerFencedAtOnce: a dial of the group's client to a broker
// the broker watch has fenced fails at once, even while the broker is
// marked silent (a read of it timed out), so that sarama's walks over
// the brokers reach a live one without a pause per try; a dial that
// fails for another reason still takes the backoff, which paces sarama's
// heartbeat retries.
func TestGroupDialerFencedAtOnce(t *testing.T) {
	const backoff = 300 * time.Millisecond
	fenced, closed := "127.0.0.1:1", "127.0.0.1:2" // nothing listens on either
	w := newBrokerWatch([]string{fenced, closed}, NewSaramaConfig("t"))
	t0 := time.Now()
	w.Observe(closed, []string{fenced, closed}, t0)
	if cut := w.Observe(closed, []string{closed}, t0.Add(time.Second)); len(cut) != 1 || !w.Fenced(fenced) {
		t.Fatalf("an answer without %s: cut %v; want it fenced", fenced, cut)
	}
	d := &groupDialer{dialer: w, backoff: backoff, quiet: time.Minute, group: "g", silent: map[string]time.Time{}}
	d.silent[fenced] = time.Now().Add(time.Minute)
	for _, tc := range []struct {
		name     string
		addr     string
		wantErr  error
		min, max time.Duration
	}{
		{"fenced and silent", fenced, errBrokerFenced, 0, backoff / 2},
		{"refused", closed, nil, backoff, time.Minute},
	} {
		start := time.Now()
		_, err := d.Dial("tcp", tc.addr)
		took := time.Since(start)
		if err == nil {
			t.Fatalf("%s: dial succeeded, want an error", tc.name)
		}
		if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.wantErr)
		}
		if took < tc.min || took > tc.max {
			t.Errorf("%s: took %v, want between %v and %v", tc.name, took, tc.min, tc.max)
		}
	}
}
