package redisstore

import (
	"context"
	"fmt"
	"math"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
)

// rangeLua reads one page of the by-avg set and the documents it names in
// one atomic step, so a page never mixes two batches.
//
// KEYS: 1 by-avg. ARGV: 1 lexicographic min, 2 max, 3 limit, 4 movie key
// prefix. Reply: the docFields values of each document, flattened.
const rangeLua = `
local ranks = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, r in ipairs(ranks) do
  local v = redis.call('HMGET', ARGV[4] .. string.sub(r, 34), 'id', 'count', 'sum', 'partition', 'version', 'sources')
  if v[1] then
    for j = 1, 6 do out[#out + 1] = v[j] end
  end
end
return out
`

var rangeScript = redis.NewScript(rangeLua)

// Get returns the aggregate of one movie, or an error wrapping
// engine.ErrNotFound when the store holds none. Safe for concurrent use.
func (s *Store) Get(ctx context.Context, movieID int64) (engine.MovieStats, error) {
	vals, err := s.client.HMGet(ctx, s.keys.movie(movieID), docFields...).Result()
	if err != nil {
		return engine.MovieStats{}, wrap(fmt.Sprintf("get movie %d", movieID), err)
	}
	m, ok, err := decodeDoc(vals)
	if err != nil {
		return engine.MovieStats{}, fmt.Errorf("redisstore: get movie %d: %w", movieID, err)
	}
	if !ok {
		return engine.MovieStats{}, fmt.Errorf("redisstore: movie %d: %w", movieID, engine.ErrNotFound)
	}
	return m, nil
}

// Load returns the stored documents for ids, read in one MULTI/EXEC so they
// come from the same moment; ids without a document are absent from the
// map. Safe for concurrent use.
func (s *Store) Load(ctx context.Context, ids []int64) (map[int64]engine.MovieStats, error) {
	out := make(map[int64]engine.MovieStats, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	cmds := make([]*redis.SliceCmd, len(ids))
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HMGet(ctx, s.keys.movie(id), docFields...)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(fmt.Sprintf("load %d movies", len(ids)), err)
	}
	for i, c := range cmds {
		m, ok, err := decodeDoc(c.Val())
		if err != nil {
			return nil, fmt.Errorf("redisstore: load movie %d: %w", ids[i], err)
		}
		if ok {
			out[m.MovieID] = m
		}
	}
	return out, nil
}

// Range returns the movies with q.MinAvg <= avg <= q.MaxAvg sorted by
// average descending then movie id ascending, at most q.Limit of them,
// strictly after q.After when set. Page.Next is the last movie's cursor
// when the page is full. An invalid query (or a NaN cursor) returns an
// error wrapping engine.ErrInvalid; no match is an empty page, not an
// error. Safe for concurrent use.
func (s *Store) Range(ctx context.Context, q engine.RangeQuery) (engine.Page, error) {
	if err := q.Validate(); err != nil {
		return engine.Page{}, fmt.Errorf("redisstore: range: %w", err)
	}
	if q.After != nil && math.IsNaN(q.After.Avg) {
		return engine.Page{}, fmt.Errorf("redisstore: range: cursor average is NaN: %w", engine.ErrInvalid)
	}
	from, to := lexFrom(q.MaxAvg), lexTo(q.MinAvg)
	if q.After != nil && !(q.After.Avg > q.MaxAvg) {
		// The cursor is inside or below the range: start after it.
		from = lexAfter(q.After.Avg, q.After.MovieID)
	}
	vals, err := rangeScript.Run(ctx, s.client, []string{s.keys.byAvg()},
		from, to, q.Limit, s.keys.moviePrefix()).Slice()
	if err != nil {
		return engine.Page{}, wrap("range", err)
	}
	if len(vals)%len(docFields) != 0 {
		return engine.Page{}, fmt.Errorf("redisstore: range: %d values in reply: %w", len(vals), errCorrupt)
	}
	var page engine.Page
	page.Movies = make([]engine.MovieStats, 0, len(vals)/len(docFields))
	for i := 0; i < len(vals); i += len(docFields) {
		m, ok, err := decodeDoc(vals[i : i+len(docFields)])
		if err != nil {
			return engine.Page{}, fmt.Errorf("redisstore: range: %w", err)
		}
		if !ok {
			return engine.Page{}, fmt.Errorf("redisstore: range: empty document: %w", errCorrupt)
		}
		page.Movies = append(page.Movies, m)
	}
	if n := len(page.Movies); n > 0 && n == q.Limit {
		last := page.Movies[n-1]
		page.Next = &engine.Cursor{Avg: last.Avg(), MovieID: last.MovieID}
	}
	return page, nil
}
