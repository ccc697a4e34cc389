//go:build !race

package testkit

// RaceEnabled reports whether the tests (and the keepstate binary they
// build) run with the race detector, which slows them several times.
const RaceEnabled = false
