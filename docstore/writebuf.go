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

// Create creates name on the base file system, buffering its writes when
// it is a table file.
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

// Write buffers p (a write at least as large as the buffer goes straight
// through); it never keeps a reference to p (Pebble may reuse it at once).
func (f *bufferedFile) Write(p []byte) (int, error) {
	if f.w == nil {
		return 0, errFileClosed
	}
	return f.w.Write(p)
}

// flush writes what is buffered to the file.
func (f *bufferedFile) flush() error {
	if f.w == nil {
		return nil
	}
	return f.w.Flush()
}

// Close writes what is buffered, closes the file and returns the buffer
// to the pool. The file is closed even if the write failed.
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

// Sync writes what is buffered and syncs the file.
func (f *bufferedFile) Sync() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.Sync()
}

// SyncData writes what is buffered and syncs the file's data.
func (f *bufferedFile) SyncData() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.SyncData()
}

// SyncTo writes what is buffered and asks for a prefix of the file to be
// synced.
func (f *bufferedFile) SyncTo(length int64) (bool, error) {
	if err := f.flush(); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}

// Stat writes what is buffered, so the size it reports counts every Write.
func (f *bufferedFile) Stat() (vfs.FileInfo, error) {
	if err := f.flush(); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

// Read writes what is buffered before reading.
func (f *bufferedFile) Read(p []byte) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

// ReadAt writes what is buffered before reading.
func (f *bufferedFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

// WriteAt writes what is buffered before writing at off.
func (f *bufferedFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}
