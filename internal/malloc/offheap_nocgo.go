//go:build !cgo

package malloc

// OffHeap reports whether Pebble allocates its block cache and memtables
// outside Go's heap: without cgo it allocates them in Go's heap.
const OffHeap = false
