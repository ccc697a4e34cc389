package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var binary struct {
	once sync.Once
	path string
	err  error
}

// Keepstate builds ./cmd/keepstate once per test process (with -race when
// the test binary has it, so child processes are checked too) and returns
// the binary's path. It lives in a per-process temp dir that Main removes
// when the tests end.
func Keepstate(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			binary.err = err
			return
		}
		dir, err := os.MkdirTemp("", "keepstate-bin-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "keepstate")
		args := []string{"build", "-o", binary.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./cmd/keepstate")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binary.err = fmt.Errorf("go build ./cmd/keepstate: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatalf("testkit: %v", binary.err)
	}
	return binary.path
}

// removeBinary deletes the binary Keepstate built, if any (Main calls it).
func removeBinary() {
	if binary.path != "" {
		_ = os.RemoveAll(filepath.Dir(binary.path))
	}
}

// moduleRoot finds the directory holding go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
