package boltstore

import (
	"context"
	"fmt"
	"math"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
	"github.com/ostafen/clover/v2"
	d "github.com/ostafen/clover/v2/document"
	"github.com/ostafen/clover/v2/query"
	"go.etcd.io/bbolt"
)

// rankQuery returns the Clover query for q: a range on the rank index,
// sorted by rank (the index order), limited to one more than the page so
// that Next is set only when another movie follows. Clover serves it by
// walking the rank index from the first matching key and stops after the
// limit: it reads the page and two more documents, never the collection.
func rankQuery(q engine.RangeQuery) *query.Query {
	lo := moviedoc.RankKey(q.MaxAvg, math.MinInt64) // avg <= MaxAvg
	hi := moviedoc.RankKey(q.MinAvg, math.MaxInt64) // avg >= MinAvg
	start := query.Field(fieldRank).GtEq(lo)
	if q.After != nil {
		if after := moviedoc.RankKey(q.After.Avg, q.After.MovieID); after >= lo {
			start = query.Field(fieldRank).Gt(after)
		}
	}
	return query.NewQuery(collection).
		Where(start.And(query.Field(fieldRank).LtEq(hi))).
		Sort(query.SortOption{Field: fieldRank, Direction: 1}).
		Limit(q.Limit + 1)
}

// Range returns movies with MinAvg <= avg <= MaxAvg, sorted by average
// descending then movie id ascending, at most q.Limit of them after
// q.After, from one snapshot. It walks the rank index and reads at most
// q.Limit+2 documents (the page, one to know whether more follow, and the
// one Clover reads before it stops), whatever the store's size. An invalid
// query (or a NaN cursor) returns ErrInvalid.
func (s *Store) Range(ctx context.Context, q engine.RangeQuery) (engine.Page, error) {
	if err := q.Validate(); err != nil {
		return engine.Page{}, fmt.Errorf("range: %w", err)
	}
	if q.After != nil && math.IsNaN(q.After.Avg) {
		return engine.Page{}, fmt.Errorf("range: %w: cursor average is NaN", engine.ErrInvalid)
	}
	if q.MinAvg > q.MaxAvg {
		return engine.Page{}, nil
	}
	var movies []engine.MovieStats
	err := s.view(ctx, func(_ *bbolt.Tx, db *clover.DB) error {
		var inner error
		err := db.ForEach(rankQuery(q), func(doc *d.Document) bool {
			if inner = ctx.Err(); inner != nil {
				return false
			}
			var m engine.MovieStats
			if m, inner = moviedoc.FromDocument(doc); inner != nil {
				return false
			}
			movies = append(movies, m)
			return true
		})
		if err != nil {
			return err
		}
		return inner
	})
	if err != nil {
		return engine.Page{}, fmt.Errorf("range: %w", err)
	}
	var page engine.Page
	if len(movies) > q.Limit {
		movies = movies[:q.Limit]
		last := movies[q.Limit-1]
		page.Next = &engine.Cursor{Avg: last.Avg(), MovieID: last.MovieID}
	}
	page.Movies = movies
	return page, nil
}
