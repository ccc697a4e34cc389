package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// scanKeys calls fn with each page of the keys matching pattern (SCAN,
// never KEYS). On a cluster it scans every master, one at a time per
// master, and never calls fn concurrently; a key moving between nodes
// during the scan may be missed or passed twice.
func (s *Store) scanKeys(ctx context.Context, pattern string, count int64, fn func([]string) error) error {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return scanNode(ctx, s.client, pattern, count, fn)
	}
	var mu sync.Mutex
	return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return scanNode(ctx, node, pattern, count, func(page []string) error {
			mu.Lock()
			defer mu.Unlock()
			return fn(page)
		})
	})
}

func scanNode(ctx context.Context, c redis.Cmdable, pattern string, count int64, fn func([]string) error) error {
	var cursor uint64
	for {
		page, next, err := c.Scan(ctx, cursor, pattern, count).Result()
		if err != nil {
			return err
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// hmget reads fields of hashes in one pipeline: in one MULTI/EXEC when
// atomic, so that the values come from one moment.
func (s *Store) hmget(ctx context.Context, atomic bool, hashes, fields []string) ([]*redis.SliceCmd, error) {
	run := s.client.Pipelined
	if atomic {
		run = s.client.TxPipelined
	}
	cmds := make([]*redis.SliceCmd, len(hashes))
	_, err := run(ctx, func(pipe redis.Pipeliner) error {
		for i, h := range hashes {
			cmds[i] = pipe.HMGet(ctx, h, fields...)
		}
		return nil
	})
	return cmds, err
}

// unlink deletes keys: in one UNLINK, or on a cluster (where they may be
// in different slots) in one pipeline of an UNLINK per key.
func (s *Store) unlink(ctx context.Context, keys []string) error {
	if !s.keys.cluster {
		return s.client.Unlink(ctx, keys...).Err()
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Unlink(ctx, k)
		}
		return nil
	})
	return err
}
