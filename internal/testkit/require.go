package testkit

import (
	"os"
	"os/exec"
	"testing"
)

// RequireEnv is the environment variable that turns a missing service into a
// test failure instead of a skip. .ci/run sets it to 1.
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
