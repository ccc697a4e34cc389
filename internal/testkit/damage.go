package testkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// DamageStore writes 4 KiB of garbage, as a bad disk would, a third of the
// way into the largest table file (at least 12 KiB, or the test fails) of
// the closed clover store in dataDir, and returns the file and its size.
func DamageStore(t testing.TB, dataDir string) (string, int64) {
	t.Helper()
	biggest, size := "", int64(0)
	paths, _ := filepath.Glob(filepath.Join(dataDir, "store", "*.sst"))
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.Size() > size {
			biggest, size = p, st.Size()
		}
	}
	if biggest == "" || size < 3*4096 {
		t.Fatalf("no table file of 12 KiB or more under %s (largest: %q, %d bytes): nothing to damage", dataDir, biggest, size)
	}
	f, err := os.OpenFile(biggest, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(strings.Repeat("\xab", 4096)), size/3); err != nil {
		t.Fatal(err)
	}
	return biggest, size
}
