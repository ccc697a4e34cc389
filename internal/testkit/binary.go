package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// binDir holds the binary Keepstate built, for removeBinary.
var binDir string

var buildBinary = sync.OnceValues(func() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if binDir, err = os.MkdirTemp("", "keepstate-bin-"); err != nil {
		return "", err
	}
	bin := filepath.Join(binDir, "keepstate")
	return bin, buildKeepstate(root, bin)
})

// Keepstate builds ./cmd/keepstate once per test process (with -race when
// the test binary has it, to check child processes too) into a temp dir
// that Main removes, and returns the binary's path.
func Keepstate(t testing.TB) string {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	return bin
}

// buildKeepstate builds ./cmd/keepstate of the module in root into bin,
// with -race when the test binary has it.
func buildKeepstate(root, bin string) error {
	args := []string{"build", "-o", bin}
	if RaceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/keepstate")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/keepstate in %s: %v\n%s", root, err, out)
	}
	return nil
}

// removeBinary deletes the binary Keepstate built, if any (Main calls it).
func removeBinary() {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// moduleRoot finds the directory holding go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	for ; err == nil; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
	}
	return "", err
}

// KeepstateAt builds ./cmd/keepstate as it was at git revision rev (from
// `git archive`, in the test's temp dir) for upgrade tests, and returns the
// binary's path. Without git or the revision (a shallow clone), the test is
// skipped (see Missing).
func KeepstateAt(t testing.TB, rev string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	git := LookPath(t, "git", "apt-get install git")
	if out, err := exec.Command(git, "-C", root, "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		Missing(t, "git revision "+rev, fmt.Sprintf("fetch the repository's whole history (git fetch --unshallow): %v %s", err, out))
	}
	src := t.TempDir()
	untar := exec.Command("bash", "-o", "pipefail", "-c", `"$0" -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, git, root, rev, src)
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s | tar: %v %s", rev, err, out)
	}
	bin := filepath.Join(t.TempDir(), "keepstate-"+rev[:min(len(rev), 12)])
	if err := buildKeepstate(src, bin); err != nil {
		t.Fatalf("testkit: at %s: %v", rev, err)
	}
	return bin
}
