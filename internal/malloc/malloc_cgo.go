//go:build cgo && linux

package malloc

/*
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

static int keepstate_tune(int arenas, int mmap_threshold) {
	int ok = mallopt(M_ARENA_MAX, arenas);
	return mallopt(M_MMAP_THRESHOLD, mmap_threshold) && ok;
}

static int keepstate_trim(void) { return malloc_trim(0); }

// keepstate_holes allocates n blocks of size bytes, touches them, and
// frees all but every keep-th: free holes inside the arena that free
// cannot return, as a churning cache leaves them. It returns the kept
// blocks in kept (n/keep+1 entries) for keepstate_release.
static void keepstate_holes(int n, size_t size, int keep, void **kept) {
	void **all = malloc(sizeof(void *) * n);
	for (int i = 0; i < n; i++) {
		all[i] = malloc(size);
		if (all[i] != NULL) memset(all[i], 1, size);
	}
	int k = 0;
	for (int i = 0; i < n; i++) {
		if (i % keep == 0) kept[k++] = all[i];
		else free(all[i]);
	}
	free(all);
}

static void keepstate_release(int n, void **kept) {
	for (int i = 0; i < n; i++) free(kept[i]);
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

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

// Trim hands the free pages of every C allocator arena back to the
// system (glibc's malloc_trim(0); free alone only returns the top of an
// arena) and reports whether it released any. It locks each arena while
// it walks it, so C allocations wait meanwhile: 2–80 ms on a 1M-movie
// store with 100 MiB of arenas. Safe for concurrent use.
func Trim() bool { return C.keepstate_trim() != 0 }

// holes leaves about n*size bytes of free holes in the C allocator's
// arenas (n blocks of size bytes, all but every keep-th freed; size under
// the mmap threshold Tune sets) and returns the function that frees the
// kept blocks. For tests of Trim and Valve.
func holes(n, size, keep int) (release func()) {
	kept := (n + keep - 1) / keep
	p := (*unsafe.Pointer)(C.malloc(C.size_t(kept) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	C.keepstate_holes(C.int(n), C.size_t(size), C.int(keep), p)
	return func() {
		C.keepstate_release(C.int(kept), p)
		C.free(unsafe.Pointer(p))
	}
}
