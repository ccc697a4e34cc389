package engine

import "testing"

// TestSaramaConfigBuffersRecords: Config.BufferedRecords is what sarama
// buffers per claimed partition (its ChannelBufferSize), for every client
// the engine opens.
func TestSaramaConfigBuffersRecords(t *testing.T) {
	for _, n := range []int{1, 77, DefaultConfig().BufferedRecords} {
		cfg := DefaultConfig()
		cfg.BufferedRecords = n
		e, err := New(cfg, nopStore{}, benchSerde{})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.saramaConfig().ChannelBufferSize; got != n {
			t.Errorf("BufferedRecords %d: ChannelBufferSize = %d, want %d", n, got, n)
		}
	}
}

// nopStore is a Store that is never called (New only checks it is set).
type nopStore struct{ Store }
