package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
)

// dropLua deletes the documents and the checkpoint of one partition in one
// atomic step; the epoch stays so that an old owner remains fenced.
//
// KEYS: 1 members, 2 checkpoint, 3 batch token, 4 by-avg.
// ARGV: 1 movie key prefix, 2 partition. Reply: documents deleted.
const dropLua = `
local ids = redis.call('SMEMBERS', KEYS[1])
local n = 0
for _, id in ipairs(ids) do
  local key = ARGV[1] .. id
  local v = redis.call('HMGET', key, 'rank', 'partition')
  if v[2] == ARGV[2] then
    if v[1] then redis.call('ZREM', KEYS[4], v[1]) end
    redis.call('DEL', key)
    n = n + 1
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return n
`

var dropScript = redis.NewScript(dropLua)

// scanChunk is the SSCAN/SCAN page size and the pipelined read size.
const scanChunk = 1000

// Claim makes the caller the writer of partition p (INCR of the epoch key)
// and returns its new epoch, greater than every epoch claimed before for p
// in this Redis database. Safe for concurrent use.
func (s *Store) Claim(ctx context.Context, p int32) (int64, error) {
	e, err := s.client.Incr(ctx, s.keys.epoch(p)).Result()
	if err != nil {
		return 0, wrap(fmt.Sprintf("claim partition %d", p), err)
	}
	return e, nil
}

// Checkpoint returns the next changelog offset to read for partition p; ok
// is false when the store holds no checkpoint for p. Safe for concurrent
// use.
func (s *Store) Checkpoint(ctx context.Context, p int32) (int64, bool, error) {
	v, err := s.client.Get(ctx, s.keys.checkpoint(p)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, wrap(fmt.Sprintf("checkpoint of partition %d", p), err)
	}
	next, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("redisstore: checkpoint of partition %d is %q: %w", p, v, errCorrupt)
	}
	return next, true, nil
}

// DropPartition deletes every document and the checkpoint of partition p
// in one atomic script, keeping its epoch, so the next owner restores it
// from the whole changelog. Dropping an empty partition is not an error.
// The script blocks Redis for the time it takes (about a second per few
// hundred thousand documents). Safe for concurrent use.
func (s *Store) DropPartition(ctx context.Context, p int32) error {
	n, err := dropScript.Run(ctx, s.client,
		[]string{s.keys.members(p), s.keys.checkpoint(p), s.keys.batch(p), s.keys.byAvg()},
		s.keys.moviePrefix(), formatInt(int64(p))).Int64()
	if err != nil {
		return wrap(fmt.Sprintf("drop partition %d", p), err)
	}
	s.log.Info("partition dropped", "partition", p, "documents", n)
	return nil
}

// ScanPartition calls fn for each document of partition p in unspecified
// order (SSCAN of the partition's members, documents read in pipelined
// chunks), stopping at the first error fn returns, which it returns as is.
// Documents written or deleted during the scan may or may not be seen; each
// id is passed at most once. Safe for concurrent use.
func (s *Store) ScanPartition(ctx context.Context, p int32, fn func(engine.MovieStats) error) error {
	seen := make(map[int64]struct{})
	var cursor uint64
	for {
		members, next, err := s.client.SScan(ctx, s.keys.members(p), cursor, "", scanChunk).Result()
		if err != nil {
			return wrap(fmt.Sprintf("scan partition %d", p), err)
		}
		ids := make([]int64, 0, len(members))
		for _, m := range members {
			id, err := strconv.ParseInt(m, 10, 64)
			if err != nil {
				return fmt.Errorf("redisstore: scan partition %d: member %q: %w", p, m, errCorrupt)
			}
			if _, dup := seen[id]; !dup {
				seen[id] = struct{}{}
				ids = append(ids, id)
			}
		}
		if err := s.scanDocs(ctx, p, ids, fn); err != nil {
			return err
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

func (s *Store) scanDocs(ctx context.Context, p int32, ids []int64, fn func(engine.MovieStats) error) error {
	if len(ids) == 0 {
		return nil
	}
	cmds := make([]*redis.SliceCmd, len(ids))
	_, err := s.client.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = pl.HMGet(ctx, s.keys.movie(id), docFields...)
		}
		return nil
	})
	if err != nil {
		return wrap(fmt.Sprintf("scan partition %d", p), err)
	}
	for i, c := range cmds {
		m, ok, err := decodeDoc(c.Val())
		if err != nil {
			return fmt.Errorf("redisstore: scan partition %d: movie %d: %w", p, ids[i], err)
		}
		if !ok || m.Partition != p {
			continue // deleted or moved since the member was listed
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}

// Reset deletes the movie layout's keys under the store's prefix —
// documents, the sorted set, checkpoints and the stream — with SCAN and
// UNLINK (never KEYS), except the partitions' epochs: the next claim then
// still returns an epoch above any a live old writer may hold, which stays
// fenced. Tables are left alone (each resets on its own, table.Reset).
// Writes running concurrently may survive it. Safe for concurrent use.
func (s *Store) Reset(ctx context.Context) error {
	var cursor uint64
	deleted := 0
	for {
		batch, next, err := s.client.Scan(ctx, cursor, s.keys.pattern(), scanChunk).Result()
		if err != nil {
			return wrap("reset", err)
		}
		batch = slices.DeleteFunc(batch, func(key string) bool { return s.keys.isEpoch(key) || s.keys.isTableKey(key) })
		if len(batch) > 0 {
			if err := s.client.Unlink(ctx, batch...).Err(); err != nil {
				return wrap("reset", err)
			}
			deleted += len(batch)
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	s.log.Info("store reset", "prefix", s.keys.prefix, "keys", deleted)
	return nil
}
