package engine

import (
	"bytes"
	"testing"

	"github.com/IBM/sarama"
)

// TestRecordArenaReset checks what the rekey stage relies on when it
// reuses its arena after each send: a reset arena hands out zeroed
// records and headers again (no field of the previous batch leaks into
// the next), in the same memory, and what it hands out before the next
// reset keeps its value while later records are built.
func TestRecordArenaReset(t *testing.T) {
	a := newRecordArena(4, 2)
	fill := func(round int64) []*sarama.ProducerMessage {
		var out []*sarama.ProducerMessage
		for i := range int64(4) {
			pm := a.msg()
			if pm.Topic != "" || pm.Key != nil || pm.Headers != nil || pm.Partition != 0 || pm.Metadata != nil {
				t.Fatalf("round %d: record %d handed out with fields set: %+v", round, i, pm)
			}
			pm.Topic = "t"
			pm.Partition = int32(i)
			pm.Key = a.enc(a.int(round*100 + i))
			pm.Metadata = round
			pm.Headers = a.headers(2)
			for j, h := range pm.Headers {
				if h.Key != nil || h.Value != nil {
					t.Fatalf("round %d: record %d header %d handed out set: %q=%q", round, i, j, h.Key, h.Value)
				}
			}
			pm.Headers[0] = sarama.RecordHeader{Key: []byte("p"), Value: a.int(round)}
			pm.Headers[1] = sarama.RecordHeader{Key: []byte("o"), Value: a.int(i)}
			out = append(out, pm)
		}
		return out
	}
	first := fill(1)
	for i, pm := range first {
		k, _ := pm.Key.Encode()
		if want := []byte{'1', '0', byte('0' + i)}; !bytes.Equal(k, want) {
			t.Fatalf("round 1: record %d key = %q; want %q", i, k, want)
		}
	}
	a.reset()
	second := fill(2)
	if first[0] != second[0] {
		t.Errorf("after reset the first record is at %p; want the same memory %p", second[0], first[0])
	}
	for i, pm := range second {
		k, _ := pm.Key.Encode()
		if want := []byte{'2', '0', byte('0' + i)}; !bytes.Equal(k, want) || pm.Metadata != int64(2) {
			t.Fatalf("round 2: record %d key = %q, metadata %v; want %q, 2", i, k, pm.Metadata, want)
		}
	}
}
