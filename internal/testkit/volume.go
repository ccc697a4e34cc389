package testkit

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Volume is a small tmpfs for disk-full tests: a store on it fails with
// ENOSPC once it is full, and Resize grows it as an operator would.
type Volume struct {
	// Dir is the mount point.
	Dir string
}

// SmallVolume mounts a tmpfs of size bytes on a fresh directory until the
// test ends. Without root (CI has it) the test is skipped (see Missing).
func SmallVolume(t testing.TB, size int64) *Volume {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "volume")
	if out, err := exec.Command("mkdir", "-p", dir).CombinedOutput(); err != nil {
		t.Fatalf("testkit: mkdir %s: %v: %s", dir, err, out)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		Missing(t, "a tmpfs mount (root)", fmt.Sprintf("run the test as root: mount: %v: %s", err, strings.TrimSpace(string(out))))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("testkit: umount %s: %v: %s", dir, err, out)
		}
	})
	return &Volume{Dir: dir}
}

// Resize changes the volume's size; files on it are kept.
func (v *Volume) Resize(t testing.TB, size int64) {
	t.Helper()
	out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%d", size), v.Dir).CombinedOutput()
	if err != nil {
		t.Fatalf("testkit: resize %s to %d bytes: %v: %s", v.Dir, size, err, out)
	}
}
