package testkit

import (
	"os"
	"os/exec"
	"testing"
)

// RequireEnv set to 1 (.ci/run does) fails tests whose services are
// missing instead of skipping them.
const RequireEnv = "KEEPSTATE_REQUIRE_SERVICES"

// ServicesRequired reports whether missing services must fail tests.
func ServicesRequired() bool { return os.Getenv(RequireEnv) == "1" }

// Missing skips the test, or fails it when services are required, with a
// message that names the service and how to install or start it.
func Missing(t testing.TB, service, how string) {
	t.Helper()
	if ServicesRequired() {
		t.Fatalf("%s is required (%s=1) but missing: %s", service, RequireEnv, how)
	}
	t.Skipf("%s is missing: %s (set %s=1 to fail instead)", service, how, RequireEnv)
}

// LookPath returns the path of binary, or calls Missing with how.
func LookPath(t testing.TB, binary, how string) string {
	t.Helper()
	p, err := exec.LookPath(binary)
	if err != nil {
		Missing(t, binary, how)
	}
	return p
}
