package storebench

import (
	"os"
	"testing"
)

// TestMain removes the benchmark stores (the Clover file and the
// redis-server) built by this process.
func TestMain(m *testing.M) {
	code := m.Run()
	teardown()
	os.Exit(code)
}
