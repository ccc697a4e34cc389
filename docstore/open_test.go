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

// TestOpenCreatesDirectoryAndPersists opens a missing directory: the new
// store holds its format marker and nothing else (no collection: tables
// create theirs), and a table's document, checkpoint and epoch survive a
// reopen.
func TestOpenCreatesDirectoryAndPersists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "data")
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open(%s) of a missing directory: %v", dir, err)
	}
	if got, want := rawKeys(t, s), map[string]string{string(formatKey): formatVersion}; !maps.Equal(got, want) {
		t.Fatalf("a new store holds %q; want only %q", got, want)
	}
	ctx := context.Background()
	tb := mustTable(t, s, movieTableSpec)
	e, err := tb.Claim(ctx, 2)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	want := engine.Doc{Key: []byte{0, 0, 0, 0, 0, 0, 1, 0x6a}, Partition: 2, Version: 4, Sources: map[int32]int64{1: 9},
		Value: []byte("count 2, sum 18"), Index: []engine.IndexValue{engine.Num(9)}}
	if err := tb.Apply(ctx, engine.DocBatch{Partition: 2, Epoch: e, Docs: []engine.Doc{want}, Checkpoint: 5}); err != nil {
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
	tb = mustTable(t, s, movieTableSpec)
	got, err := tb.Get(ctx, want.Key)
	if err != nil || !sameTableDoc(got, want) {
		t.Fatalf("Get after reopen = %+v, %v; want %+v", got, err, want)
	}
	if next, ok, err := tb.Checkpoint(ctx, 2); err != nil || !ok || next != 5 {
		t.Fatalf("Checkpoint after reopen = %d, %v, %v; want 5, true", next, ok, err)
	}
	if e2, err := tb.Claim(ctx, 2); err != nil || e2 <= e {
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

// TestClosedStoreIsUnavailable checks that every call on a closed store,
// and on its tables, fails with ErrUnavailable, and that a second Close
// does nothing.
func TestClosedStoreIsUnavailable(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	tb := mustTable(t, s, ordersSpec)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v; want nil", err)
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"OpenTable", func() error { _, err := s.OpenTable(ctx, ordersSpec); return err }},
		{"Get", func() error { _, err := tb.Get(ctx, []byte("k")); return err }},
		{"Load", func() error { _, err := tb.Load(ctx, [][]byte{[]byte("k")}); return err }},
		{"Claim", func() error { _, err := tb.Claim(ctx, 0); return err }},
		{"Checkpoint", func() error { _, _, err := tb.Checkpoint(ctx, 0); return err }},
		{"Apply", func() error { return tb.Apply(ctx, engine.DocBatch{Epoch: 1}) }},
		{"Query", func() error { _, err := tb.Query(ctx, engine.IndexQuery{Index: "total", Limit: 1}); return err }},
		{"DropPartition", func() error { return tb.DropPartition(ctx, 0) }},
	} {
		if err := tc.call(); !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("%s after Close = %v; want ErrUnavailable", tc.name, err)
		}
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
