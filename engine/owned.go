package engine

import (
	"context"
	"fmt"
	"slices"
)

// ownedQuerier answers queries from a store that may also hold copies of
// partitions this instance does not run: stale copies of partitions it
// owned before a rebalance (a local store), or partitions it is restoring.
// Only partitions RUNNING here are answered.
type ownedQuerier struct {
	r *Router
	q Querier
}

// OwnedQuerier wraps q so that Get answers only movies whose partition is
// RUNNING on this instance (ErrUnavailable otherwise: the caller routes by
// Owner first, so this only happens in a race with a rebalance) and Range
// returns only documents of partitions RUNNING here. Use it for stores
// local to an instance; a shared store (Redis) needs no wrapping. Safe for
// concurrent use.
func (e *Engine) OwnedQuerier(q Querier) Querier { return &ownedQuerier{r: e.route, q: q} }

// Get returns the stored document of movieID when its partition is RUNNING
// here (or in hand-over, see handover.go), ErrNotFound when there is none,
// and an error wrapping ErrUnavailable otherwise.
func (o *ownedQuerier) Get(ctx context.Context, movieID int64) (MovieStats, error) {
	n := o.r.numParts.Load()
	if n == 0 {
		return MovieStats{}, fmt.Errorf("engine not connected yet: %w", ErrUnavailable)
	}
	p := PartitionFor(Int64Keys.Append(nil, movieID), n)
	if !o.r.answerable(p) {
		return MovieStats{}, fmt.Errorf("partition %d of movie %d is not running on this instance: %w", p, movieID, ErrUnavailable)
	}
	m, err := o.q.Get(ctx, movieID)
	if err != nil {
		return m, err
	}
	// The partition may have stopped running during the read.
	if !o.r.answerable(p) {
		return MovieStats{}, fmt.Errorf("partition %d of movie %d stopped running on this instance: %w", p, movieID, ErrUnavailable)
	}
	return m, nil
}

// Range pages through the store until it has q.Limit documents of running
// partitions or the store has no more.
func (o *ownedQuerier) Range(ctx context.Context, q RangeQuery) (Page, error) {
	page, _, err := o.rangeCovered(ctx, q)
	return page, err
}

// RangeLocal answers q from the engine's store for the partitions RUNNING
// on this instance and returns which partitions the page covers (sorted).
// It is what an instance contributes to a range query merged across
// instances. Safe for concurrent use.
// It answers ErrInvalid for an engine not built by New (not the movie job).
func (e *Engine) RangeLocal(ctx context.Context, q RangeQuery) (Page, []int32, error) {
	mq, ok := e.table.(interface{ MovieQuerier() Querier })
	if !ok {
		return Page{}, nil, fmt.Errorf("range over movies: job %s is not the movie job: %w", e.job.Spec().Name, ErrInvalid)
	}
	return (&ownedQuerier{r: e.route, q: mq.MovieQuerier()}).rangeCovered(ctx, q)
}

func (o *ownedQuerier) rangeCovered(ctx context.Context, q RangeQuery) (Page, []int32, error) {
	if err := q.Validate(); err != nil {
		return Page{}, nil, err
	}
	running := o.r.answerableSet()
	var out Page
	inner := q
	for done := false; !done; {
		page, err := o.q.Range(ctx, inner)
		if err != nil {
			return Page{}, nil, err
		}
		for _, m := range page.Movies {
			if !running[m.Partition] {
				continue
			}
			out.Movies = append(out.Movies, m)
			if len(out.Movies) == q.Limit {
				out.Next = &Cursor{Avg: m.Avg(), MovieID: m.MovieID}
				done = true
				break
			}
		}
		if page.Next == nil {
			break
		}
		inner.After = page.Next
	}
	// A partition that stopped running during the query is not covered.
	var covered []int32
	out.Movies, covered = stillCovered(running, o.r.answerableSet(), out.Movies, func(m MovieStats) int32 { return m.Partition })
	return out, covered, nil
}

// stillCovered returns the partitions of running that are still in now,
// sorted, and the items whose partition (part) is one of them: what a
// query begun with running answers once partitions that stopped running
// meanwhile are taken out.
func stillCovered[T any](running, now map[int32]bool, items []T, part func(T) int32) ([]T, []int32) {
	covered := make([]int32, 0, len(running))
	for p := range running {
		if now[p] {
			covered = append(covered, p)
		}
	}
	if len(covered) < len(running) {
		kept := items[:0]
		for _, it := range items {
			if now[part(it)] {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	slices.Sort(covered)
	return items, covered
}
