package docstore

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// countingFile counts the writes that reach the file, and fails them once
// failAfter writes went through (failAfter < 0: never).
type countingFile struct {
	vfs.File
	writes    int
	failAfter int
}

var errWriteFailed = errors.New("injected write failure")

func (f *countingFile) Write(p []byte) (int, error) {
	if f.failAfter >= 0 && f.writes >= f.failAfter {
		return 0, errWriteFailed
	}
	f.writes++
	return f.File.Write(p)
}

func newCountingFile(t *testing.T, failAfter int) (*countingFile, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "000001.sst")
	f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	return &countingFile{File: f, failAfter: failAfter}, path
}

func TestBufferedFileWrites(t *testing.T) {
	tests := []struct {
		name      string
		sizes     []int
		maxWrites int // writes that may reach the file, Close included
	}{
		{"one small write", []int{100}, 1},
		{"many 4 KiB blocks", repeat(4096, 200), 4},
		{"exactly one buffer", []int{tableWriteBuffer}, 1},
		{"larger than the buffer", []int{3*tableWriteBuffer + 7}, 1},
		{"small then large", []int{10, 2 * tableWriteBuffer, 10}, 3},
		{"odd sizes", []int{1, 4095, 4097, 300000, 12, 65536, 1}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cf, path := newCountingFile(t, -1)
			f := &bufferedFile{File: cf, w: bufio.NewWriterSize(cf, tableWriteBuffer)}
			var want []byte
			for i, n := range tc.sizes {
				p := bytes.Repeat([]byte{byte('a' + i)}, n)
				want = append(want, p...)
				got, err := f.Write(p)
				if err != nil || got != n {
					t.Fatalf("Write(%d bytes) = %d, %v; want %d, nil", n, got, err, n)
				}
				for j := range p {
					p[j] = 0 // Pebble may reuse what it wrote
				}
			}
			st, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Size(); got != int64(len(want)) {
				t.Errorf("Stat size = %d, want %d (every Write counted)", got, len(want))
			}
			back := make([]byte, len(want))
			if _, err := f.ReadAt(back, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, want) {
				t.Error("ReadAt returned other bytes than were written")
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if cf.writes > tc.maxWrites {
				t.Errorf("%d writes reached the file, want at most %d", cf.writes, tc.maxWrites)
			}
			onDisk, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(onDisk, want) {
				t.Errorf("file holds %d bytes, want the %d written, in order", len(onDisk), len(want))
			}
		})
	}
}

func repeat(n, times int) []int {
	s := make([]int, times)
	for i := range s {
		s[i] = n
	}
	return s
}

func TestBufferedFileSyncsWhatItBuffered(t *testing.T) {
	syncs := []struct {
		name string
		sync func(f *bufferedFile) error
	}{
		{"Sync", func(f *bufferedFile) error { return f.Sync() }},
		{"SyncData", func(f *bufferedFile) error { return f.SyncData() }},
		{"SyncTo", func(f *bufferedFile) error { _, err := f.SyncTo(1); return err }},
	}
	for _, tc := range syncs {
		t.Run(tc.name, func(t *testing.T) {
			cf, path := newCountingFile(t, -1)
			f := &bufferedFile{File: cf, w: bufio.NewWriterSize(cf, tableWriteBuffer)}
			defer func() { _ = f.Close() }()
			if _, err := f.Write([]byte("block")); err != nil {
				t.Fatal(err)
			}
			if err := tc.sync(f); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "block" {
				t.Errorf("after %s the file holds %q, want %q", tc.name, got, "block")
			}
		})
	}
}

func TestBufferedFileFailedWriteIsSticky(t *testing.T) {
	cf, _ := newCountingFile(t, 1) // the second write to the file fails
	f := &bufferedFile{File: cf, w: bufio.NewWriterSize(cf, tableWriteBuffer)}
	block := make([]byte, 4096)
	var err error
	for i := 0; i <= 2*tableWriteBuffer/len(block) && err == nil; i++ {
		_, err = f.Write(block)
	}
	if !errors.Is(err, errWriteFailed) {
		t.Fatalf("Write error = %v, want the file's failure once the buffer is written a second time", err)
	}
	if _, err := f.Write(block); !errors.Is(err, errWriteFailed) {
		t.Errorf("Write after a failure = %v, want the same failure", err)
	}
	if err := f.Sync(); !errors.Is(err, errWriteFailed) {
		t.Errorf("Sync after a failure = %v, want the same failure", err)
	}
	if err := f.Close(); !errors.Is(err, errWriteFailed) {
		t.Errorf("Close after a failure = %v, want the same failure", err)
	}
	if _, err := f.Write(block); err == nil {
		t.Error("Write after Close succeeded")
	}
}

func TestBufferedFSBuffersOnlyTables(t *testing.T) {
	dir := t.TempDir()
	fs := bufferedFS{vfs.Default}
	tests := []struct {
		name     string
		buffered bool
	}{
		{"000007.sst", true},
		{"000008.log", false},
		{"MANIFEST-000001", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := fs.Create(filepath.Join(dir, tc.name), vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			if _, got := f.(*bufferedFile); got != tc.buffered {
				t.Errorf("Create(%s) buffered = %v, want %v", tc.name, got, tc.buffered)
			}
		})
	}
	if _, err := fs.Create(filepath.Join(dir, "missing", "x.sst"), vfs.WriteCategoryUnspecified); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Create in a missing directory = %v, want ENOENT", err)
	}
}
