package web

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/keepstate/keepstate/engine"
)

// peerPage is one instance's part of a scattered query: its items, whether
// it has more, and the partitions it answered for.
type peerPage[T any] struct {
	items   []T
	more    bool
	covered []int32
}

// scatter is one query to merge across instances with gather.
type scatter[T any] struct {
	mem   engine.Membership
	local peerPage[T] // this instance's answer
	// ask queries the instance at addr; an error costs its partitions.
	ask       func(ctx context.Context, addr string) (peerPage[T], error)
	partition func(T) int32     // the partition an item belongs to
	less      func(a, b T) bool // the query's order
	limit     int
	warn      func(addr string, err error) // reports an instance that did not answer
	// everyone, when set, are the instances to ask instead of the owners
	// of the partitions not covered here.
	everyone []string
}

// gathered is a scattered query's merged page.
type gathered[T any] struct {
	items   []T     // in order, at most limit
	more    bool    // an instance had more, or the page was cut at limit
	missing []int32 // partitions no live instance answered for
	stale   []int32 // partitions answered from standby copies (fillFromReplicas)
}

// gather merges this instance's page with the pages of the instances
// owning the other partitions, asked concurrently. An instance that does
// not answer well costs its partitions: they are reported missing. Two
// instances may both claim a partition across a rebalance: the first
// answer is kept. It fails (engine.ErrUnavailable) only when no partition
// could be answered.
func gather[T any](ctx context.Context, q scatter[T]) (gathered[T], error) {
	done := setOf(q.local.covered)
	peers := map[string]bool{}
	for p, addr := range q.mem.Owners {
		if !done[p] && q.everyone == nil {
			peers[addr] = true
		}
	}
	for _, addr := range q.everyone {
		peers[addr] = true
	}
	delete(peers, q.mem.Self)
	all, more := q.local.items, q.local.more
	var mu sync.Mutex
	var wg sync.WaitGroup
	for addr := range peers {
		wg.Go(func() {
			pp, err := q.ask(ctx, addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				q.warn(addr, err)
				return
			}
			fresh := map[int32]bool{}
			for _, p := range pp.covered {
				if !done[p] {
					done[p], fresh[p] = true, true
				}
			}
			for _, it := range pp.items {
				if fresh[q.partition(it)] {
					all = append(all, it)
				}
			}
			more = more || pp.more
		})
	}
	wg.Wait()
	if len(done) == 0 && q.mem.Partitions > 0 {
		return gathered[T]{}, fmt.Errorf("no partition could be answered: %w", engine.ErrUnavailable)
	}
	var g gathered[T]
	for p := int32(0); p < q.mem.Partitions; p++ {
		if !done[p] {
			g.missing = append(g.missing, p)
		}
	}
	g.items, g.more = firstN(all, q.less, q.limit, more)
	return g, nil
}

// setOf returns the set of partitions ps.
func setOf(ps []int32) map[int32]bool {
	set := make(map[int32]bool, len(ps))
	for _, p := range ps {
		set[p] = true
	}
	return set
}

// firstN sorts items stably by less and cuts them at limit (then more).
func firstN[T any](items []T, less func(a, b T) bool, limit int, more bool) ([]T, bool) {
	sort.SliceStable(items, func(i, j int) bool { return less(items[i], items[j]) })
	if len(items) > limit {
		return items[:limit], true
	}
	return items, more
}
