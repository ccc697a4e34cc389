package storebench

import (
	"context"
	"fmt"
	"sync"

	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
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

// loadPartition writes version 1 of every movie of partition p through s in
// batches of size, claiming p first.
func loadPartition(ctx context.Context, s engine.Store, w *writer, n int, p int32, size int) error {
	epoch, err := s.Claim(ctx, p)
	if err != nil {
		return fmt.Errorf("claim partition %d: %w", p, err)
	}
	return partitionIDs(n, p, size, func(ids []int64) error {
		if err := s.Apply(ctx, w.batch(p, epoch, ids)); err != nil {
			return fmt.Errorf("load partition %d: %w", p, err)
		}
		return nil
	})
}

// buildClover creates the Clover store of movies 1..n in dir the way
// docstore's own benchmark does: fsync off, 10,000 new documents per
// batch (Clover inserts them with one call), one partition after another.
func buildClover(dir string, n int, w *writer) error {
	s, err := docstore.Open(dir, docstore.WithFsync(false))
	if err != nil {
		return err
	}
	for p := range int32(partitions) {
		if err := loadPartition(context.Background(), s, w, n, p, 10_000); err != nil {
			_ = s.Close()
			return fmt.Errorf("build clover store: %w", err)
		}
	}
	return s.Close()
}

// buildRedis loads movies 1..n under prefix the way redisstore's own
// benchmark does: the stream off, 1000-document batches, every partition
// writing concurrently.
func buildRedis(ctx context.Context, url, prefix string, n int, w *writer) error {
	s, err := redisstore.Open(ctx, url, redisstore.WithPrefix(prefix), redisstore.WithStreamMaxLen(0))
	if err != nil {
		return err
	}
	defer s.Close()
	errs := make([]error, partitions)
	var wg sync.WaitGroup
	for p := range int32(partitions) {
		wg.Go(func() { errs[p] = loadPartition(ctx, s, w, n, p, 1000) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("build redis store: %w", err)
		}
	}
	return nil
}
