package redisstore

import (
	"fmt"
	"os"
	"testing"

	"github.com/keepstate/keepstate/internal/testkit"
)

func TestMain(m *testing.M) {
	// Expected dial failures (outage tests) would flood the output.
	RouteClientLogs(nil)
	code := m.Run()
	closeShared()
	if err := testkit.StopSharedRedis(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}
