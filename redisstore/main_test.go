package redisstore

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// Expected dial failures (outage tests) would flood the output.
	RouteClientLogs(nil)
	code := m.Run()
	closeShared()
	os.Exit(code)
}
