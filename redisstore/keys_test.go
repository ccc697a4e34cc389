package redisstore

import (
	"math"
	"testing"
)

func TestSourcesRoundTrip(t *testing.T) {
	tests := []map[int32]int64{nil, {0: 0}, {3: 1, 0: 7, math.MaxInt32: math.MaxInt64, -1: -1}}
	for _, src := range tests {
		enc := encodeSources(src)
		got, err := decodeSources(enc)
		if err != nil {
			t.Fatalf("decodeSources(%q): %v", enc, err)
		}
		if len(got) != len(src) {
			t.Fatalf("round trip of %v = %v", src, got)
		}
		for k, v := range src {
			if got[k] != v {
				t.Fatalf("round trip of %v = %v", src, got)
			}
		}
	}
	if got := encodeSources(map[int32]int64{2: 5, 0: 1, 1: 3}); got != "0:1,1:3,2:5" {
		t.Errorf("encodeSources = %q, want sorted 0:1,1:3,2:5", got)
	}
	for _, bad := range []string{"1", "a:1", "1:b", "1:2,", "99999999999:1"} {
		if _, err := decodeSources(bad); err == nil {
			t.Errorf("decodeSources(%q): got nil error", bad)
		}
	}
}

func TestPatternEscapesGlob(t *testing.T) {
	if got, want := (keys{prefix: `a*b?[c]\`}).pattern(), `a\*b\?\[c\]\\*`; got != want {
		t.Errorf("pattern() = %q, want %q", got, want)
	}
}
