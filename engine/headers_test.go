package engine

import (
	"errors"
	"maps"
	"testing"

	"github.com/IBM/sarama"
)

func TestSourcesRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   map[int32]int64
		want string
	}{
		{"empty", map[int32]int64{}, ""},
		{"one", map[int32]int64{2: 41}, "2:41"},
		{"sorted by partition", map[int32]int64{11: 7, 0: 9000000000, 3: 0}, "0:9000000000,3:0,11:7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := encodeSources(tt.in)
			if got != tt.want {
				t.Fatalf("encodeSources = %q, want %q", got, tt.want)
			}
			back, err := decodeSources(got)
			if err != nil || !maps.Equal(back, tt.in) {
				t.Fatalf("decodeSources(%q) = %v, %v; want %v", got, back, err, tt.in)
			}
		})
	}
}

func TestDecodeSourcesRejectsGarbage(t *testing.T) {
	for _, in := range []string{"x", "1:", ":2", "1:2,", "1;2", "99999999999:1", "1:2:3"} {
		if _, err := decodeSources(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("decodeSources(%q) error = %v, want ErrInvalid", in, err)
		}
	}
}

func TestSourceOf(t *testing.T) {
	hdr := func(kv ...string) []*sarama.RecordHeader {
		var hs []*sarama.RecordHeader
		for i := 0; i+1 < len(kv); i += 2 {
			hs = append(hs, &sarama.RecordHeader{Key: []byte(kv[i]), Value: []byte(kv[i+1])})
		}
		return hs
	}
	tests := []struct {
		name    string
		hs      []*sarama.RecordHeader
		p       int32
		off     int64
		ok      bool
		wantErr bool
	}{
		{"present", hdr(HeaderSourcePartition, "2", HeaderSourceOffset, "77"), 2, 77, true, false},
		{"absent (not written by keepstate)", nil, 0, 0, false, false},
		{"only one header", hdr(HeaderSourcePartition, "2"), 0, 0, false, false},
		{"garbage", hdr(HeaderSourcePartition, "two", HeaderSourceOffset, "77"), 0, 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, off, ok, err := sourceOf(tt.hs)
			if (err != nil) != tt.wantErr || p != tt.p || off != tt.off || ok != tt.ok {
				t.Fatalf("sourceOf = %d, %d, %v, %v; want %d, %d, %v, err %v", p, off, ok, err, tt.p, tt.off, tt.ok, tt.wantErr)
			}
		})
	}
}

func TestConfigValidateAndTopics(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	bad := []func(*Config){
		func(c *Config) { c.Brokers = nil },
		func(c *Config) { c.ApplicationID = "" },
		func(c *Config) { c.CommitInterval = 0 },
		func(c *Config) { c.CacheMaxDocs = 0 },
		func(c *Config) { c.SessionTimeout = 10 },
		func(c *Config) { c.ReplicationFactor = 0 },
	}
	for i, mutate := range bad {
		c := DefaultConfig()
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: Validate = %v, want ErrInvalid", i, err)
		}
	}
	got := ok.Topics()
	want := Topics{Input: "input", Output: "output", Repartition: "keepstate-repartition",
		Changelog: "keepstate-changelog", DLQ: "keepstate-dlq"}
	if got != want {
		t.Errorf("Topics = %+v, want %+v", got, want)
	}
}

func TestDoubleRoundTrip(t *testing.T) {
	for _, v := range []float64{0, 9, 7.25, -1.5, 1e300} {
		got, err := DecodeDouble(EncodeDouble(v))
		if err != nil || got != v {
			t.Errorf("DecodeDouble(EncodeDouble(%v)) = %v, %v", v, got, err)
		}
	}
	if _, err := DecodeDouble([]byte{1, 2, 3}); !errors.Is(err, ErrInvalid) {
		t.Errorf("3-byte double: err %v, want ErrInvalid", err)
	}
	// Java's DoubleSerializer writes 9.0 as 0x4022000000000000.
	if got := EncodeDouble(9); string(got) != "\x40\x22\x00\x00\x00\x00\x00\x00" {
		t.Errorf("EncodeDouble(9) = %x", got)
	}
}

// encodeSources renders sources as "p:o,p:o" sorted by partition.
func encodeSources(m map[int32]int64) string { return string(appendSources(nil, m)) }
