package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
	"github.com/ostafen/clover/v2"
	"go.etcd.io/bbolt"
)

// scanChunk is how many documents ScanPartition loads per read transaction.
const scanChunk = 512

// partitionIDs lists the movie ids of partition p, in id order, from the
// members bucket (one key per movie, partition first).
func partitionIDs(tx *bbolt.Tx, p int32) []int64 {
	var ids []int64
	prefix := binary.BigEndian.AppendUint32(nil, uint32(p))
	c := tx.Bucket(membersBucket).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		ids = append(ids, memberMovie(k))
	}
	return ids
}

// ScanPartition calls fn for each document of partition p, in movie id
// order. It lists the partition's ids from one snapshot, then loads and
// hands out documents in chunks without holding a transaction while fn
// runs, so fn may use the store. A document deleted meanwhile is skipped.
// It stops at the first error of fn and returns it.
func (s *Store) ScanPartition(ctx context.Context, p int32, fn func(engine.MovieStats) error) error {
	var ids []int64
	err := s.view(ctx, func(tx *bbolt.Tx, _ *clover.DB) error {
		ids = partitionIDs(tx, p)
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan partition %d: %w", p, err)
	}
	for len(ids) > 0 {
		chunk := ids[:min(scanChunk, len(ids))]
		ids = ids[len(chunk):]
		docs, err := s.Load(ctx, chunk)
		if err != nil {
			return fmt.Errorf("scan partition %d: %w", p, err)
		}
		for _, id := range chunk {
			if m, ok := docs[id]; ok && m.Partition == p {
				if err := fn(m); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// DropPartition deletes every document and the checkpoint of partition p
// in one transaction. Claim epochs are kept, so an old owner stays fenced.
func (s *Store) DropPartition(ctx context.Context, p int32) error {
	var n int
	err := s.update(ctx, func(tx *bbolt.Tx, db *clover.DB) error {
		// Collect first: deleting while a cursor walks a bucket would move
		// bbolt's cursor under it.
		ids := partitionIDs(tx, p)
		members := tx.Bucket(membersBucket)
		for _, id := range ids {
			if err := db.DeleteById(collection, moviedoc.DocID(id)); err != nil {
				return fmt.Errorf("delete movie %d: %w", id, err)
			}
			if err := members.Delete(memberKey(p, id)); err != nil {
				return err
			}
		}
		n = len(ids)
		return tx.Bucket(checkpointsBucket).Delete(partitionKey(p))
	})
	if err != nil {
		return fmt.Errorf("drop partition %d: %w", p, err)
	}
	s.log.Info("boltstore partition dropped", "partition", p, "docs", n)
	return nil
}

// Reset deletes every document, checkpoint and epoch in one transaction,
// leaving an empty store (indexes recreated on the empty collection).
func (s *Store) Reset(ctx context.Context) error {
	err := s.update(ctx, func(tx *bbolt.Tx, _ *clover.DB) error {
		for _, name := range dataBuckets {
			if err := tx.DeleteBucket(name); err != nil {
				return fmt.Errorf("delete bucket %s: %w", name, err)
			}
		}
		return createData(tx)
	})
	if err != nil {
		return fmt.Errorf("reset boltstore %s: %w", s.dir, err)
	}
	s.log.Info("boltstore reset", "dir", s.dir)
	return nil
}
