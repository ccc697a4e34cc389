//go:build !cgo || !linux

package malloc

// Tune does nothing without cgo (Pebble then allocates in Go's heap) or
// off Linux (glibc's mallopt settings are Linux's); see the package doc.
func Tune() error { return nil }

// Trim does nothing without cgo or off Linux and reports false.
func Trim() bool { return false }
