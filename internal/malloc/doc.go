// Package malloc tunes the C allocator of the process, which holds the
// memory Pebble allocates outside Go's heap when keepstate is built with
// cgo: its block cache and memtables (Pebble's internal/manual package).
//
// glibc's defaults suit short-lived C programs, not a long-running Go
// process whose C allocations come from many threads: it keeps up to
// eight arenas per core, one per thread that allocated, and after the
// first large block is freed it raises its mmap threshold (up to 32 MiB),
// so 16 MiB memtables come from the arenas and their freed space stays in
// the process. At 1M movies that cost about 100 MiB of resident memory
// (docs/benchmarks.md, "Memory"). Tune caps the arenas at two
// and fixes the mmap threshold at 128 KiB, so large blocks go back to the
// system when freed.
//
// Freed blocks of the block cache still leave holes inside the arenas
// that free cannot return; Valve hands them back (Trim) when the process
// nears its memory limit.
//
// Without cgo (CGO_ENABLED=0, the container image) Pebble allocates in
// Go's heap and Tune does nothing.
package malloc
