package engine

import (
	"testing"

	"github.com/IBM/sarama"
)

// TestDrain takes what a channel has buffered, up to maxDrain, in order,
// without blocking, and stops at a closed channel.
func TestDrain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		buffered int
		close    bool
		want     int
	}{
		{"nothing buffered", 0, false, 1},
		{"some buffered", 5, false, 6},
		{"more than a batch", 3 * maxDrain, false, maxDrain},
		{"closed after some", 3, true, 4},
		{"closed and empty", 0, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := make(chan *sarama.ConsumerMessage, tc.buffered+1)
			for i := range tc.buffered {
				ch <- &sarama.ConsumerMessage{Offset: int64(i + 1)}
			}
			if tc.close {
				close(ch)
			}
			got := drain(&sarama.ConsumerMessage{Offset: 0}, ch)
			if len(got) != tc.want {
				t.Fatalf("drained %d records; want %d", len(got), tc.want)
			}
			for i, m := range got {
				if m.Offset != int64(i) {
					t.Fatalf("record %d has offset %d; want %d (in order)", i, m.Offset, i)
				}
			}
			if left := len(ch); left != tc.buffered+1-tc.want {
				t.Errorf("%d records left in the channel; want %d", left, tc.buffered+1-tc.want)
			}
		})
	}
}
