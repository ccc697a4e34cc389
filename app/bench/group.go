package bench

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// exited delivers the first child or peer that exits.
func (b *bench) exited() <-chan *Child {
	all := append([]*Child{b.child}, b.peers...)
	ch := make(chan *Child, len(all))
	for _, c := range all {
		go func() {
			<-c.done
			ch <- c
		}()
	}
	return ch
}

// groupUsage adds the peers' CPU time to pr's, raises its peak RSS to the
// largest child's and returns a note with each child's peak RSS and store
// size, in instance order.
func (b *bench) groupUsage(pr *PhaseResult) (string, error) {
	var rss, disk []string
	for i, c := range append([]*Child{b.child}, b.peers...) {
		u, err := c.Usage()
		if err != nil {
			return "", err
		}
		if i > 0 {
			pr.CPUSeconds += u.CPU.Seconds()
		}
		mib := float64(u.PeakRSS) / (1 << 20)
		pr.PeakRSSMiB = max(pr.PeakRSSMiB, mib)
		dir := filepath.Join(b.work, "store")
		if i > 0 {
			dir = filepath.Join(b.work, fmt.Sprintf("store-%d", i))
		}
		size, err := dirSize(dir)
		if err != nil {
			return "", err
		}
		rss = append(rss, fmt.Sprintf("%.0f", mib))
		disk = append(disk, fmt.Sprintf("%.0f", float64(size)/(1<<20)))
	}
	return fmt.Sprintf("instances' peak RSS %s MiB, stores %s MiB", strings.Join(rss, "/"), strings.Join(disk, "/")), nil
}

// dirSize is the size of the files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile (a compaction)
		}
		n += info.Size()
		return nil
	})
	return n, err
}
