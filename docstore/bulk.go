package docstore

import "encoding/json"

// bulkLoad is the state of a restore into an empty store, the path that
// makes a full restore fast. It starts with the first replay batch
// (engine.Batch.Replay) into an empty partition while the store holds no
// documents, and covers every partition that starts the same way while it
// lasts. While it is on, every document in the store was written by it and
// is in the prior cache, so a movie the cache does not know is new: its
// batches read nothing. A write appends the document, its rank entry and
// members key; a movie written again by a later batch also deletes its old
// rank entry, named from the cache. Nothing is rewritten in place.
//
// The first write of any other kind (a live batch, a replay into a
// partition that was not empty, a drop or a reset), or a full prior cache,
// ends the load; later batches read what the cache does not hold. A crash
// ends it too: the reopened store reads. Guarded by Store.wmu.
type bulkLoad struct {
	on    bool
	parts map[int32]bool
}

// bulkFor reports whether a replay batch of partition p can take the
// bulk-load path, starting a load when p and the store are empty. It must
// be called, under wmu, with the batch about to write p.
func (s *Store) bulkFor(b kvReader, p int32, replay bool) (bool, error) {
	if !replay || s.noBulk || s.priors.max == 0 || (s.bulk.on && s.priors.full()) {
		s.endBulk()
		return false, nil
	}
	if s.bulk.on && s.bulk.parts[p] {
		return true, nil
	}
	empty, err := partitionEmpty(b, p)
	if err != nil || !empty {
		s.endBulk()
		return false, err
	}
	if !s.bulk.on {
		size, err := collectionSize(b)
		if err != nil || size != 0 {
			return false, err
		}
		s.priors.pin() // holds nothing of an empty store; no eviction while the load lasts
		s.bulk = bulkLoad{on: true, parts: map[int32]bool{}}
		s.log.Info("docstore bulk load started", "partition", p)
	}
	s.bulk.parts[p] = true
	return true, nil
}

// endBulk ends a bulk load, if one is on.
func (s *Store) endBulk() {
	if !s.bulk.on {
		return
	}
	s.log.Info("docstore bulk load ended", "partitions", len(s.bulk.parts), "cached_movies", s.priors.len())
	s.bulk = bulkLoad{}
	s.priors.unpin()
}

// partitionEmpty reports whether p has neither a checkpoint nor a
// document.
func partitionEmpty(b kvReader, p int32) (bool, error) {
	if v, err := b.get(partitionKey(nsCheckpoints, p)); err != nil || v != nil {
		return false, err
	}
	prefix := partitionKey(nsMembers, p)
	it, err := b.iter(prefix, prefixUpper(prefix), false)
	if err != nil {
		return false, err
	}
	found := it.seek(prefix)
	return !found, it.close()
}

// collectionSize reads the collection size from Clover's metadata.
func collectionSize(r kvReader) (int, error) {
	raw, err := r.get(collectionKey)
	if err != nil {
		return 0, err
	}
	var meta struct{ Size int }
	if err := json.Unmarshal(raw, &meta); err != nil {
		return 0, err
	}
	return meta.Size, nil
}
