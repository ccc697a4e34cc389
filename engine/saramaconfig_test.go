package engine

import "testing"

// TestSaramaConfigBuffersRecords: Config.BufferedRecords is what sarama
// buffers per claimed partition (its ChannelBufferSize), for every client
// the engine opens.
func TestSaramaConfigBuffersRecords(t *testing.T) {
	for _, n := range []int{1, 77, DefaultConfig().BufferedRecords} {
		cfg := DefaultConfig()
		cfg.BufferedRecords = n
		e, err := NewJob(cfg, nopTable{}, benchJob())
		if err != nil {
			t.Fatal(err)
		}
		if got := e.saramaConfig().ChannelBufferSize; got != n {
			t.Errorf("BufferedRecords %d: ChannelBufferSize = %d, want %d", n, got, n)
		}
	}
}

// nopTable is a Table that is never called (NewJob only checks it is set).
type nopTable struct{ Table }
