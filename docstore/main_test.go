package docstore

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the benchmark store built by this process (unless it
// lives in KEEPSTATE_BENCH_DIR).
func TestMain(m *testing.M) {
	code := m.Run()
	if benchData.cleanup {
		os.RemoveAll(filepath.Dir(benchData.dir))
	}
	os.Exit(code)
}
