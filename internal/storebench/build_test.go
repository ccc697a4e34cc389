package storebench

import (
	"context"
	"fmt"

	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/boltstore"
	"github.com/keepstate/keepstate/redisstore"
)

// partitionIDs calls fn with the ids of partition p among 1..n, ascending,
// in chunks of at most size.
func partitionIDs(n int, p int32, size int, fn func(ids []int64) error) error {
	first := int64(p)
	if first == 0 {
		first = partitions
	}
	ids := make([]int64, 0, size)
	for id := first; id <= int64(n); id += partitions {
		ids = append(ids, id)
		if len(ids) == size {
			if err := fn(ids); err != nil {
				return err
			}
			ids = ids[:0]
		}
	}
	if len(ids) > 0 {
		return fn(ids)
	}
	return nil
}

// replayBatch is the size of a restore's replay batches (engine/restore.go).
const replayBatch = 5000

// loadPartition writes version 1 of every movie of partition p through s in
// replay batches (Batch.Replay, as a restore from the changelog writes) of
// size, claiming p first.
func loadPartition(ctx context.Context, s engine.Store, w *writer, n int, p int32, size int) error {
	epoch, err := s.Claim(ctx, p)
	if err != nil {
		return fmt.Errorf("claim partition %d: %w", p, err)
	}
	return partitionIDs(n, p, size, func(ids []int64) error {
		b := w.batch(p, epoch, ids)
		b.Replay = true
		if err := s.Apply(ctx, b); err != nil {
			return fmt.Errorf("load partition %d: %w", p, err)
		}
		return nil
	})
}

// loadAll replays movies 1..n into s the way a full restore does: replay
// batches of 5000 documents, one partition after another (each partition
// is one changelog read in order).
func loadAll(ctx context.Context, s engine.Store, w *writer, n int) error {
	for p := range int32(partitions) {
		if err := loadPartition(ctx, s, w, n, p, replayBatch); err != nil {
			return err
		}
	}
	return nil
}

// buildClover creates the Clover store (Pebble) of movies 1..n in dir by a
// full restore: replay batches, fsync on (the default).
func buildClover(dir string, n int, w *writer) error {
	s, err := docstore.Open(dir)
	if err != nil {
		return err
	}
	if err := loadAll(context.Background(), s, w, n); err != nil {
		_ = s.Close()
		return fmt.Errorf("build clover store: %w", err)
	}
	return s.Close()
}

// buildBbolt creates the old Clover-on-bbolt store the same way.
func buildBbolt(dir string, n int, w *writer) error {
	s, err := boltstore.Open(dir)
	if err != nil {
		return err
	}
	if err := loadAll(context.Background(), s, w, n); err != nil {
		_ = s.Close()
		return fmt.Errorf("build bbolt store: %w", err)
	}
	return s.Close()
}

// buildRedis loads movies 1..n under prefix the same way (the averages
// stream off: a restore does not feed it).
func buildRedis(ctx context.Context, url, prefix string, n int, w *writer) error {
	s, err := redisstore.Open(ctx, url, redisstore.WithPrefix(prefix), redisstore.WithStreamMaxLen(0))
	if err != nil {
		return err
	}
	defer s.Close()
	if err := loadAll(ctx, s, w, n); err != nil {
		return fmt.Errorf("build redis store: %w", err)
	}
	return nil
}
