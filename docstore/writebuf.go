package docstore

import (
	"bufio"
	"errors"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// tableWriteBuffer is how many bytes of a table file are gathered before
// one write system call: Pebble writes its files one 4 KiB block at a
// time, and those system calls cost compactions much of their CPU
// (BenchmarkUniformCycle).
const tableWriteBuffer = 256 << 10

// tableWriters recycles the buffers: a flush, a compaction and an
// ingestion each hold one while they write a file.
var tableWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, tableWriteBuffer) }}

// bufferedFS is the file system Pebble writes the store with: the base
// file system, except that table files (".sst") it creates write through a
// tableWriteBuffer. Everything else (the write-ahead log, the manifest) is
// written as Pebble writes it.
type bufferedFS struct{ vfs.FS }

// Create creates name, buffering its writes when it is a table file.
func (fs bufferedFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil || !strings.HasSuffix(name, ".sst") {
		return f, err
	}
	w := tableWriters.Get().(*bufio.Writer)
	w.Reset(f)
	return &bufferedFile{File: f, w: w}, nil
}

// bufferedFile gathers sequential writes to a new file in a bufio.Writer
// and hands them to the file tableWriteBuffer bytes at a time. Every other
// call that could observe the file's contents or durability (Sync,
// SyncData, SyncTo, Stat, the reads, WriteAt, Close) writes what is
// buffered first, so to its caller the file behaves as if each Write had
// reached it. A failed write fails every call after it (bufio.Writer's
// error is sticky). Not safe for concurrent use, as Pebble's writable
// files are not.
type bufferedFile struct {
	vfs.File
	w *bufio.Writer // nil once closed
}

// errFileClosed is returned by a write to a closed bufferedFile.
var errFileClosed = errors.New("docstore: write to a closed table file")

// Write buffers p; it never keeps a reference to p (Pebble may reuse it).
func (f *bufferedFile) Write(p []byte) (int, error) {
	if f.w == nil {
		return 0, errFileClosed
	}
	return f.w.Write(p)
}

func (f *bufferedFile) flush() error {
	if f.w == nil {
		return nil
	}
	return f.w.Flush()
}

// Close writes what is buffered, closes the file (even if that failed)
// and returns the buffer to the pool.
func (f *bufferedFile) Close() error {
	err := f.flush()
	if f.w != nil {
		f.w.Reset(nil) // drops the file and a sticky error
		tableWriters.Put(f.w)
		f.w = nil
	}
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

// flushed writes what is buffered, then calls fn.
func flushed[T any](f *bufferedFile, fn func() (T, error)) (T, error) {
	if err := f.flush(); err != nil {
		var zero T
		return zero, err
	}
	return fn()
}

// The calls below write what is buffered first (see bufferedFile).
func (f *bufferedFile) Sync() error { return f.syncWith(f.File.Sync) }

func (f *bufferedFile) SyncData() error { return f.syncWith(f.File.SyncData) }

func (f *bufferedFile) syncWith(sync func() error) error {
	if err := f.flush(); err != nil {
		return err
	}
	return sync()
}

func (f *bufferedFile) SyncTo(length int64) (bool, error) {
	return flushed(f, func() (bool, error) { return f.File.SyncTo(length) })
}

func (f *bufferedFile) Stat() (vfs.FileInfo, error) { return flushed(f, f.File.Stat) }

func (f *bufferedFile) Read(p []byte) (int, error) {
	return flushed(f, func() (int, error) { return f.File.Read(p) })
}

func (f *bufferedFile) ReadAt(p []byte, off int64) (int, error) {
	return flushed(f, func() (int, error) { return f.File.ReadAt(p, off) })
}

func (f *bufferedFile) WriteAt(p []byte, off int64) (int, error) {
	return flushed(f, func() (int, error) { return f.File.WriteAt(p, off) })
}
