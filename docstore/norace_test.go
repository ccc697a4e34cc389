//go:build !race

package docstore

// raceEnabled is true under the race detector, which slows Clover's
// reflection-heavy writes about fourfold; big fixtures shrink then.
const raceEnabled = false
