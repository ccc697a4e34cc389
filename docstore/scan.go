package docstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/keepstate/keepstate/engine"
)

// scanChunk is how many documents ScanPartition loads per snapshot.
const scanChunk = 512

// dropChunk is how many movies DropPartition names at a time: the
// documents it reads for them are held until their tombstones are written.
const dropChunk = 4096

// partitionMembers lists the movies of partition p, in id order, from the
// members keys (one per movie, partition first: one key range). It reads
// only the keys; their values carry nothing (memberMark).
func partitionMembers(r kvReader, p int32) ([]int64, error) {
	prefix := partitionKey(nsMembers, p)
	it, err := r.iter(prefix, prefixUpper(prefix), false)
	if err != nil {
		return nil, err
	}
	var out []int64
	for ok := it.seek(prefix); ok; ok = it.next() {
		if len(it.key()) != 13 {
			_ = it.close()
			return nil, fmt.Errorf("corrupt members entry %x", it.key())
		}
		out = append(out, memberMovie(it.key()))
	}
	return out, it.close()
}

// ScanPartition calls fn for each document of partition p, in movie id
// order. It lists the partition's ids from one snapshot, then loads and
// hands out documents in chunks without holding a snapshot while fn
// runs, so fn may use the store. A document deleted meanwhile is skipped.
// It stops at the first error of fn and returns it.
func (s *Store) ScanPartition(ctx context.Context, p int32, fn func(engine.MovieStats) error) error {
	var ids []int64
	err := s.read(ctx, func(r kvReader) error {
		var err error
		ids, err = partitionMembers(r, p)
		return err
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
// in one batch. The members keys (one key range) name the movies; each
// movie's rank entry is named by its average, from the write cache or else
// from its document. The batch holds one tombstone per document and rank
// entry and one range deletion for the members. Claim epochs are kept, so
// an old owner stays fenced.
func (s *Store) DropPartition(ctx context.Context, p int32) error {
	var n int
	err := s.update(ctx, func(b kvBatch) (func(), error) {
		s.endBulk()
		ids, err := partitionMembers(b, p)
		if err != nil {
			return nil, err
		}
		var key []byte
		type known struct {
			old           prior
			exists, found bool // found: the write cache knows the movie
		}
		olds := make([]known, 0, min(len(ids), dropChunk))
		for chunk := range slices.Chunk(ids, dropChunk) {
			// The documents the write cache does not know are read with
			// one iterator seeking forward, a chunk at a time (a chunk's
			// documents are garbage once its tombstones are written).
			olds = olds[:0]
			var unknown []int64
			for _, id := range chunk {
				old, exists, found := s.priors.lookup(id)
				olds = append(olds, known{old, exists, found})
				if !found {
					unknown = append(unknown, id)
				}
			}
			docs := make(map[int64]engine.MovieStats, len(unknown))
			if len(unknown) > 0 {
				if err := s.loadSorted(b, unknown, docs); err != nil {
					return nil, err
				}
			}
			for i, id := range chunk {
				old, ok := olds[i].old, olds[i].exists
				if !olds[i].found {
					var m engine.MovieStats
					m, ok = docs[id]
					old = priorOf(m)
				}
				if !ok || old.part != p {
					continue // not this partition's document: only the key goes
				}
				if err := b.del(nsKey(nsClover, docKey(id))); err != nil {
					return nil, err
				}
				key = rankEntry(append(key[:0], nsClover), old.avg(), id)
				if err := b.del(key); err != nil {
					return nil, err
				}
				n++
			}
		}
		prefix := partitionKey(nsMembers, p)
		if err := b.delRange(prefix, prefixUpper(prefix)); err != nil {
			return nil, err
		}
		if err := addSize(b, -n); err != nil {
			return nil, err
		}
		return func() { s.priors.forget(ids); s.gen++ }, b.del(partitionKey(nsCheckpoints, p))
	})
	if err != nil {
		return fmt.Errorf("drop partition %d: %w", p, err)
	}
	s.log.Info("docstore partition dropped", "partition", p, "docs", n)
	return nil
}

// Reset deletes every document and checkpoint in one batch (range
// deletions), leaving an empty store with the collection and its index
// recreated. The claim epochs survive, so an old writer stays fenced.
// Tables (OpenTable) are left alone: only the movies collection's Clover
// keys are deleted.
func (s *Store) Reset(ctx context.Context) error {
	movies := nsKey(nsClover, []byte("c:"+collection+";"))
	err := s.update(ctx, func(b kvBatch) (func(), error) {
		s.endBulk()
		for _, ns := range []byte{nsCheckpoints, nsMembers} {
			if err := b.delRange([]byte{ns}, nsUpper(ns)); err != nil {
				return nil, err
			}
		}
		if err := b.delRange(movies, prefixUpper(movies)); err != nil {
			return nil, err
		}
		if err := b.del(collectionKey); err != nil {
			return nil, err
		}
		return func() { s.priors.clear(); s.gen++ }, createData(b)
	})
	if err != nil {
		return fmt.Errorf("reset docstore %s: %w", s.dir, err)
	}
	s.log.Info("docstore reset", "dir", s.dir)
	return nil
}
