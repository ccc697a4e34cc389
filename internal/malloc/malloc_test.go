package malloc

import "testing"

// TestTune checks that the allocator takes the settings (mallopt returns
// failure for a setting it does not know) and that a second call is fine.
func TestTune(t *testing.T) {
	for i := range 2 {
		if err := Tune(); err != nil {
			t.Fatalf("call %d: Tune() = %v; want nil", i+1, err)
		}
	}
}
