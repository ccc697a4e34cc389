package docstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// snapshot returns every file under dir with its content and modification
// time, to prove that Open left a directory untouched.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		content := ""
		if e.Type().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			content = string(b)
		}
		out[path] = fmt.Sprintf("%v %v %d %q", info.Mode(), info.ModTime().UnixNano(), info.Size(), content)
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", dir, err)
	}
	return out
}

func TestOpenCreatesDirectoryAndPersists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "data")
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open(%s) of a missing directory: %v", dir, err)
	}
	ctx := context.Background()
	e, err := s.Claim(ctx, 2)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	want := engine.MovieStats{MovieID: 362, Partition: 2, Count: 2, Sum: 18, Version: 4, Sources: map[int32]int64{1: 9}}
	if err := s.Apply(ctx, engine.Batch{Partition: 2, Epoch: e, Docs: []engine.MovieStats{want}, Checkpoint: 5}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, lockInfoFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock info after Close: %v; want removed", err)
	}

	s, err = Open(dir)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	got, err := s.Get(ctx, 362)
	if err != nil || got.Count != 2 || got.Sum != 18 || got.Version != 4 || got.Sources[1] != 9 {
		t.Fatalf("Get after reopen = %+v, %v; want %+v", got, err, want)
	}
	if next, ok, err := s.Checkpoint(ctx, 2); err != nil || !ok || next != 5 {
		t.Fatalf("Checkpoint after reopen = %d, %v, %v; want 5, true", next, ok, err)
	}
	if e2, err := s.Claim(ctx, 2); err != nil || e2 <= e {
		t.Fatalf("Claim after reopen = %d, %v; want > %d", e2, err, e)
	}
}

func TestOpenRefusesForeignData(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(t *testing.T, dir string) string // returns the path to open
		wantMsg string
	}{
		{"directory with other files", func(t *testing.T, dir string) string {
			mustWrite(t, filepath.Join(dir, "notes.txt"), "mine")
			if err := os.Mkdir(filepath.Join(dir, "photos"), 0o755); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "no keepstate store"},
		{"a file instead of a directory", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "file")
			mustWrite(t, p, "not a directory")
			return p
		}, "not a directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			path := tc.setup(t, root)
			before := snapshot(t, root)
			s, err := Open(path, WithLockTimeout(200*time.Millisecond))
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) succeeded; want ErrNotStore", path)
			}
			if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Open(%s) = %v; want ErrNotStore mentioning %q", path, err, tc.wantMsg)
			}
			if !strings.Contains(err.Error(), path) && !strings.Contains(err.Error(), root) {
				t.Fatalf("Open error %q does not name the path %s", err, path)
			}
			if after := snapshot(t, root); !maps.Equal(before, after) {
				t.Fatalf("Open modified the directory:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

func TestOpenAcceptsFreshVolume(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open of a volume root holding only lost+found: %v", err)
	}
	s.Close()
}

func TestOpenLockedDirectoryFailsFast(t *testing.T) {
	dir := t.TempDir()
	first, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	second, err := Open(dir, WithLockTimeout(300*time.Millisecond))
	took := time.Since(start)
	if err == nil {
		second.Close()
		t.Fatal("second Open of a locked directory succeeded; want ErrLocked")
	}
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v; want ErrLocked", err)
	}
	if took > 2*time.Second {
		t.Fatalf("second Open failed after %v; want about the 300ms lock timeout", took)
	}
	for _, want := range []string{dir, fmt.Sprintf("pid=%d", os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("lock error %q does not mention %q", err, want)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	third, err := Open(dir, WithLockTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatalf("Open after the holder closed: %v", err)
	}
	third.Close()
}

func TestClosedStoreIsUnavailable(t *testing.T) {
	s := openTemp(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v; want nil", err)
	}
	if _, err := s.Get(context.Background(), 1); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Get after Close = %v; want ErrUnavailable", err)
	}
	if _, err := s.Claim(context.Background(), 0); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Claim after Close = %v; want ErrUnavailable", err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
