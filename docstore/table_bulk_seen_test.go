package docstore

import (
	"fmt"
	"testing"
)

// TestSeenKeys adds more keys than the first filter holds: every key added
// is found (across the filters), and few keys never added are.
func TestSeenKeys(t *testing.T) {
	s := seenKeys{first: 10_000}
	const n = 15_000
	key := func(i int) []byte { return fmt.Appendf(nil, "key-%08d", i) }
	for i := range n {
		s.add(key(i))
	}
	if got := len(s.filters); got != 2 {
		t.Errorf("%d filters after %d keys; want 2", got, n)
	}
	for i := range n {
		if !s.mayContain(key(i)) {
			t.Fatalf("mayContain(%q) = false after adding it", key(i))
		}
	}
	const probes = 20_000
	fp := 0
	for i := n; i < n+probes; i++ {
		if s.mayContain(key(i)) {
			fp++
		}
	}
	if rate := float64(fp) / probes; rate > 0.03 {
		t.Errorf("false-positive rate %.4f; want at most 0.03", rate)
	}
	var empty seenKeys
	if empty.mayContain(key(0)) {
		t.Errorf("an empty set may contain %q; want never", key(0))
	}
}
