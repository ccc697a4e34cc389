//go:build cgo

package malloc

// OffHeap reports whether Pebble allocates its block cache and memtables
// outside Go's heap: with cgo it does, through C's allocator.
const OffHeap = true
