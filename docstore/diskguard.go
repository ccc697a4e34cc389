package docstore

import (
	"fmt"
	"syscall"

	"github.com/keepstate/keepstate/engine"
)

// DefaultDiskReserve is the free space the store keeps on its volume by
// default (see WithDiskReserve).
const DefaultDiskReserve = 128 << 20

// diskGuard refuses writes while the store's volume has less free space
// than the reserve. Pebble cannot survive a failed write to its log or
// manifest (it stops the process), so a full disk must be caught first:
// the refused write is ErrUnavailable, which the engine retries with a
// backoff until space is freed. The reserve leaves room for what Pebble
// writes besides the batch (log, flushes, compactions).
type diskGuard struct {
	dir     string
	reserve uint64 // 0: no check
}

// check returns nil when the volume has at least the reserve free, else
// ErrUnavailable wrapping ENOSPC. A failing statfs is reported as is.
func (g diskGuard) check() error {
	if g.reserve == 0 {
		return nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(g.dir, &st); err != nil {
		return fmt.Errorf("docstore %s: free space: %w", g.dir, err)
	}
	free := st.Bavail * uint64(st.Bsize)
	if free >= g.reserve {
		return nil
	}
	return fmt.Errorf("docstore %s: disk full (%s free, the store keeps %s in reserve for its log and compactions), free space or grow the volume: %w: %w",
		g.dir, mib(free), mib(g.reserve), engine.ErrUnavailable, syscall.ENOSPC)
}

// mib formats n bytes in MiB.
func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
