package docstore

import (
	"errors"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// tableWriteBuffer is how many bytes of a table file are gathered before
// one write system call. Pebble hands its files 4 KiB writes (one data
// block each, through a 4 KiB bufio.Writer); on the uniform 1M-movie run
// those write calls were a third of the compactions' CPU, and a write of
// 256 KiB costs the kernel less than half as much per byte as 64 writes of
// 4 KiB (docs/benchmarks.md, "Table files written in 256 KiB").
const tableWriteBuffer = 256 << 10

// tableWriteBuffers recycles the buffers: a flush, a compaction and an
// ingestion each hold one while they write a file.
var tableWriteBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, tableWriteBuffer)
	return &b
}}

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
	return newBufferedFile(f), nil
}

// bufferedFile gathers sequential writes to a new file and hands them to
// the file tableWriteBuffer bytes at a time. Every other call that could
// observe the file's contents or durability (Sync, SyncData, SyncTo, Stat,
// the reads, WriteAt, Close) writes what is buffered first, so to its
// caller the file behaves as if each Write had reached it. A failed write
// fails every call after it (the bytes it held are not retried out of
// order). Not safe for concurrent use, as Pebble's writable files are not.
type bufferedFile struct {
	vfs.File
	buf    *[]byte
	failed error
}

func newBufferedFile(f vfs.File) *bufferedFile {
	return &bufferedFile{File: f, buf: tableWriteBuffers.Get().(*[]byte)}
}

// errFileClosed is returned by a write to a closed bufferedFile.
var errFileClosed = errors.New("docstore: write to a closed table file")

// Write buffers p, writing the buffer out whenever it fills; it never
// keeps a reference to p (Pebble may reuse it at once).
func (f *bufferedFile) Write(p []byte) (int, error) {
	if f.failed != nil {
		return 0, f.failed
	}
	if f.buf == nil {
		return 0, errFileClosed
	}
	n := len(p)
	for len(p) > 0 {
		b := *f.buf
		if len(b) == 0 && len(p) >= cap(b) {
			// A write at least as large as the buffer goes straight through.
			if _, err := f.File.Write(p); err != nil {
				f.failed = err
				return 0, err
			}
			return n, nil
		}
		c := copy(b[len(b):cap(b)], p)
		*f.buf = b[:len(b)+c]
		p = p[c:]
		if len(*f.buf) == cap(b) {
			if err := f.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// flush writes what is buffered to the file.
func (f *bufferedFile) flush() error {
	if f.failed != nil {
		return f.failed
	}
	if f.buf == nil || len(*f.buf) == 0 {
		return nil
	}
	if _, err := f.File.Write(*f.buf); err != nil {
		f.failed = err
		return err
	}
	*f.buf = (*f.buf)[:0]
	return nil
}

// Close writes what is buffered, closes the file and returns the buffer
// to the pool. The file is closed even if the write failed.
func (f *bufferedFile) Close() error {
	err := f.flush()
	if f.buf != nil {
		*f.buf = (*f.buf)[:0]
		tableWriteBuffers.Put(f.buf)
		f.buf = nil
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
