package testkit

import "testing"

// TestFreePortNeverRepeats: ports handed out in one process are distinct,
// even when the kernel offers a just-closed port again.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for i := range 300 {
		p, err := freePort()
		if err != nil {
			t.Fatalf("freePort call %d: %v", i, err)
		}
		if seen[p] {
			t.Fatalf("freePort call %d: port %d given twice", i, p)
		}
		seen[p] = true
	}
}
