//go:build cgo && linux

package malloc

/*
#include <malloc.h>

static int keepstate_tune(int arenas, int mmap_threshold) {
	int ok = mallopt(M_ARENA_MAX, arenas);
	return mallopt(M_MMAP_THRESHOLD, mmap_threshold) && ok;
}
*/
import "C"

import "errors"

// Tune sets the C allocator's arena count to 2 and its mmap threshold to
// 128 KiB (see the package doc). Call it once, early, before the store
// opens; it is safe to call more than once. It returns an error only if
// the allocator refused a setting, which leaves its defaults in place.
func Tune() error {
	if C.keepstate_tune(2, 128<<10) == 0 {
		return errors.New("malloc: mallopt refused the arena or mmap settings")
	}
	return nil
}
