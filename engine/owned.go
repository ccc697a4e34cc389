package engine

import (
	"context"
)

// ownedQuerier answers queries from a store that may also hold stale
// copies of partitions this instance no longer owns (a local store after a
// rebalance): Range skips documents of partitions the engine does not own.
type ownedQuerier struct {
	e *Engine
	q Querier
}

// OwnedQuerier wraps q so that Range returns only documents of partitions
// this instance owns; Get is passed through (callers route by Owner first).
// Use it for stores local to an instance; a shared store (Redis) needs no
// wrapping. Safe for concurrent use.
func (e *Engine) OwnedQuerier(q Querier) Querier { return &ownedQuerier{e: e, q: q} }

// Get returns the stored document of movieID, or ErrNotFound.
func (o *ownedQuerier) Get(ctx context.Context, movieID int64) (MovieStats, error) {
	return o.q.Get(ctx, movieID)
}

// Range pages through the store until it has q.Limit owned documents or
// the store has no more.
func (o *ownedQuerier) Range(ctx context.Context, q RangeQuery) (Page, error) {
	if err := q.Validate(); err != nil {
		return Page{}, err
	}
	var out Page
	inner := q
	for {
		page, err := o.q.Range(ctx, inner)
		if err != nil {
			return Page{}, err
		}
		for _, m := range page.Movies {
			if !o.e.Owns(m.Partition) {
				continue
			}
			out.Movies = append(out.Movies, m)
			if len(out.Movies) == q.Limit {
				out.Next = &Cursor{Avg: m.Avg(), MovieID: m.MovieID}
				return out, nil
			}
		}
		if page.Next == nil {
			return out, nil
		}
		inner.After = page.Next
	}
}
