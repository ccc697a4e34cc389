//go:build !cgo || !linux

package malloc

// OffHeap reports whether Pebble allocates its block cache and memtables
// outside Go's heap; without cgo on Linux this package assumes it does
// not (Pebble's allocator falls back to Go's heap without cgo).
const OffHeap = false

// Tune does nothing without cgo on Linux: Pebble then allocates in Go's
// heap (see the package doc).
func Tune() error { return nil }
