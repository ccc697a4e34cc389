package bench

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// childArgs is the `keepstate run` command line of child i (0: the one
// asked and checked).
func (b *bench) childArgs(i int) []string {
	addr := b.httpAddr
	if i > 0 {
		addr = b.peerAddrs[i-1]
	}
	args := []string{"run", "--brokers", strings.Join(b.brokers, ","), "--schema-registry", b.registry,
		"--store", b.cfg.Store, "--data-dir", b.storeDir(i), "--redis-url", b.cfg.RedisURL,
		"--redis-mode", b.cfg.RedisMode, "--http-addr", addr, "--advertise-addr", addr, "--application-id", b.appID,
		"--input-topic", b.encode.Topic, "--output-topic", b.appID + "-averages", "--instance-id", fmt.Sprintf("bench-%d", i)}
	if b.cfg.Instances > 1 {
		// The children route queries to each other.
		args = append(args, "--peer-secret", b.appID+"-peer-secret")
	}
	return append(args, b.cfg.ChildArgs...)
}

// storeDir is the clover directory of child i.
func (b *bench) storeDir(i int) string {
	if i == 0 {
		return filepath.Join(b.work, "store")
	}
	return filepath.Join(b.work, fmt.Sprintf("store-%d", i))
}

// startChild starts the child and its peers.
func (b *bench) startChild() error {
	c, err := StartChild(filepath.Join(b.work, "keepstate.log"), b.cfg.Binary, b.childArgs(0)...)
	if err != nil {
		return err
	}
	b.child, b.peers = c, nil
	for i := 1; i < b.cfg.Instances; i++ {
		p, err := StartChild(filepath.Join(b.work, fmt.Sprintf("keepstate-%d.log", i)), b.cfg.Binary, b.childArgs(i)...)
		if err != nil {
			return err
		}
		b.peers = append(b.peers, p)
	}
	return nil
}

// stopChild stops the running children, if any, cleanly, at once.
func (b *bench) stopChild() {
	var wg sync.WaitGroup
	for _, c := range append([]*Child{b.child}, b.peers...) {
		if c != nil && !c.Exited() {
			wg.Go(func() { c.Stop(30 * time.Second) })
		}
	}
	wg.Wait()
}

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
		size, err := dirSize(b.storeDir(i))
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
