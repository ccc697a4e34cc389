package docstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/keepstate/keepstate/engine"
)

// Apply writes b as one batch: every changed document (its Clover
// document, index entries and members key), the collection size and the
// partition checkpoint, or nothing. It is synced when the fsync option is
// on, except for replay batches (a power loss that drops them only makes
// the restore run again; the log keeps batches in order, so a later synced
// batch makes them durable too). b.Epoch must be the partition's current
// claim (else ErrFenced); a document that fails Doc.Validate or belongs to
// another partition is ErrInvalid; see engine.Table for the version rules.
// It reads the stored document of each key the write cache does not hold.
// A replay batch into an empty table takes the bulk-load path (tableBulk),
// durable once its buffer is written out rather than on return; Apply
// keeps its documents (not copies) until then, so the caller must not
// change them.
func (t *table) Apply(ctx context.Context, b engine.DocBatch) error {
	for _, doc := range b.Docs {
		if err := doc.Validate(t.spec); err != nil {
			return fmt.Errorf("apply partition %d: %w", b.Partition, err) // err names the table
		}
		if doc.Partition != b.Partition {
			return fmt.Errorf("table %s: apply partition %d: key %s has partition %d: %w",
				t.spec.Name, b.Partition, keyString(doc.Key), doc.Partition, engine.ErrInvalid)
		}
	}
	handled, err := t.applyBulk(ctx, b)
	if !handled {
		op := tableWriteOp{blind: true, sync: t.s.sync && !b.Replay, size: tableBatchSize(b), cache: t.cache,
			endBulk: len(b.Docs) > 0}
		err = t.s.tableWrite(ctx, op, func(kb kvBatch) (func(), error) {
			if err := t.checkClaim(kb, b.Partition, b.Epoch); err != nil {
				return nil, err
			}
			after, err := t.writeDocs(kb, b.Docs, b.Replay)
			if err != nil {
				return nil, err
			}
			return after, kb.set(t.l.partKey(tabCheckpoint, b.Partition), int64Value(b.Checkpoint))
		})
	}
	if err != nil {
		return fmt.Errorf("table %s: apply partition %d (%d docs): %w", t.spec.Name, b.Partition, len(b.Docs), err)
	}
	return nil
}

// writeDocs writes docs into b (a blind batch) as if one by one: a
// document not newer than the stored version (or an earlier one of the
// batch) is skipped on replay and refuses the batch with ErrFenced
// otherwise. after records in the write cache what the batch read and
// wrote, once committed. The caller holds wmu.
func (t *table) writeDocs(b kvBatch, docs []engine.Doc, replay bool) (after func(), err error) {
	if len(docs) == 0 {
		return nil, nil
	}
	// Key order (stable), so that a key's documents are adjacent and stored
	// documents are read with one iterator walking forward. Sorting
	// positions moves 4 bytes a swap where a Doc is about 100.
	docs = sortedByKey(docs)
	var keys [][]byte
	for i, d := range docs {
		if i == 0 || !bytes.Equal(d.Key, docs[i-1].Key) {
			keys = append(keys, d.Key)
		}
	}
	cache := t.cache
	priors := make([]tablePrior, len(keys))
	var unknown [][]byte // keys the cache does not hold, and their positions
	var at []int
	for i, k := range keys {
		if p, ok := cache.m.get(string(k)); ok {
			priors[i] = p
		} else {
			unknown, at = append(unknown, k), append(at, i)
		}
	}
	if err := t.readPriors(b, unknown, func(j int, p tablePrior) { priors[at[j]] = p }); err != nil {
		return nil, err
	}
	w := tableWriter{t: t, b: b, enc: newTableEncoder()}
	var learned []cached // each key's state after the batch
	for k, i := 0, 0; k < len(keys); k++ {
		j := i + 1
		for j < len(docs) && bytes.Equal(docs[j].Key, keys[k]) {
			j++
		}
		old := priors[k]
		have, version, last := old.exists, old.version, -1
		for n := i; n < j; n++ {
			if have && docs[n].Version <= version {
				if replay {
					continue
				}
				return nil, fmt.Errorf("%w: key %s version %d is not newer than the stored version %d",
					engine.ErrFenced, keyString(docs[n].Key), docs[n].Version, version)
			}
			have, version, last = true, docs[n].Version, n
		}
		switch {
		case last >= 0:
			if err := w.put(docs[last], old); err != nil {
				return nil, err
			}
			d := docs[last]
			learned = append(learned, cached{string(d.Key), docPrior(t.spec, d)})
		case old.exists:
			learned = append(learned, cached{string(keys[k]), old})
		}
		i = j
	}
	after = func() { t.s.tcache.putAll(cache, learned, t.s.cacheMax) }
	return after, t.addSize(b, w.fresh)
}

// sortedByKey returns a copy of docs in key order, documents of one key
// in their order in docs.
func sortedByKey(docs []engine.Doc) []engine.Doc {
	at := make([]int32, len(docs))
	for i := range at {
		at[i] = int32(i)
	}
	slices.SortFunc(at, func(a, b int32) int {
		return cmp.Or(bytes.Compare(docs[a].Key, docs[b].Key), cmp.Compare(a, b))
	})
	out := make([]engine.Doc, len(docs))
	for i, j := range at {
		out[i] = docs[j]
	}
	return out
}

// tableWriter writes one batch's documents of a table.
type tableWriter struct {
	t       *table
	b       kvBatch
	enc     *tableEncoder
	fresh   int    // documents added to the collection
	scratch []byte // key buffer (batches copy what they are given)
	old     []byte
}

// put writes doc over old. It never reads.
func (w *tableWriter) put(doc engine.Doc, old tablePrior) error {
	l, spec := w.t.l, w.t.spec
	olds := old.indexData()
	for pos, ix := range spec.Indexes {
		w.scratch = l.indexEntry(w.scratch[:0], pos, doc.Index[pos], ix.Kind, doc.Key)
		if old.exists {
			var v []byte
			v, olds = nextIndexValue(olds, ix.Kind)
			w.old = l.rawIndexEntry(w.old[:0], pos, v, doc.Key)
			if bytes.Equal(w.old, w.scratch) {
				continue // the entry is there already
			}
			if err := w.b.del(w.old); err != nil {
				return err
			}
		}
		if err := w.b.set(w.scratch, nil); err != nil {
			return err
		}
	}
	if !old.exists {
		w.fresh++
	} else if old.part != doc.Partition {
		if err := w.b.del(l.memberKey(old.part, doc.Key)); err != nil {
			return err
		}
	}
	w.scratch = l.docKey(w.scratch[:0], doc.Key)
	if err := w.b.set(w.scratch, w.enc.encode(spec, doc)); err != nil {
		return err
	}
	if old.exists && old.part == doc.Partition {
		return nil // the members key is there already (it holds nothing else)
	}
	return w.b.set(l.memberKey(doc.Partition, doc.Key), memberMark)
}

// addSize adds n to the size in the collection's Clover metadata.
func (t *table) addSize(b kvBatch, n int) error {
	if n == 0 {
		return nil
	}
	return setSize(b, t.l.collKey, func(size int) int { return size + n })
}

// memberKeys lists the keys of partition p's documents, in key order,
// from its members keys (their values are ignored).
func (t *table) memberKeys(r kvReader, p int32) ([][]byte, error) {
	prefix := t.l.partKey(tabMembers, p)
	it, err := r.iter(prefix, prefixUpper(prefix), false)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for ok := it.seek(prefix); ok; ok = it.next() {
		out = append(out, bytes.Clone(it.key()[len(prefix):]))
	}
	return out, it.close()
}

// DropPartition deletes every document, index entry and the checkpoint of
// partition p in one batch, the documents named by the members keys and
// read for their index values. Epochs are kept: an old owner stays fenced.
func (t *table) DropPartition(ctx context.Context, p int32) error {
	var n int
	err := t.s.tableWrite(ctx, tableWriteOp{blind: true, sync: t.s.sync, cache: t.cache, endBulk: true}, func(b kvBatch) (func(), error) {
		keys, err := t.memberKeys(b, p)
		if err != nil {
			return nil, err
		}
		var key []byte
		var docs []engine.Doc
		for chunk := range slices.Chunk(keys, dropChunk) {
			docs = docs[:0]
			err := t.readDocs(b, chunk, func(_ int, raw []byte) error {
				doc, err := decodeTableDoc(raw, t.spec, true)
				if err != nil {
					return err
				}
				if doc.Partition == p { // else only its members key goes
					doc.Key = bytes.Clone(doc.Key)
					docs = append(docs, doc)
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
			for _, doc := range docs {
				if err := b.del(t.l.docKey(key[:0], doc.Key)); err != nil {
					return nil, err
				}
				for pos, ix := range t.spec.Indexes {
					key = t.l.indexEntry(key[:0], pos, doc.Index[pos], ix.Kind, doc.Key)
					if err := b.del(key); err != nil {
						return nil, err
					}
				}
			}
			n += len(docs)
		}
		prefix := t.l.partKey(tabMembers, p)
		if err := b.delRange(prefix, prefixUpper(prefix)); err != nil {
			return nil, err
		}
		if err := t.addSize(b, -n); err != nil {
			return nil, err
		}
		forget := func() { t.s.tcache.forget(t.cache, keys) }
		return forget, b.del(t.l.partKey(tabCheckpoint, p))
	})
	if err != nil {
		return fmt.Errorf("table %s: drop partition %d: %w", t.spec.Name, p, err)
	}
	t.s.log.Info("docstore table partition dropped", "table", t.spec.Name, "partition", p, "docs", n)
	return nil
}

// Reset deletes every document, index entry and checkpoint of the table in
// one batch; its spec and claim epochs survive, so an old writer stays
// fenced.
func (t *table) Reset(ctx context.Context) error {
	err := t.s.tableWrite(ctx, tableWriteOp{blind: true, sync: t.s.sync, cache: t.cache, endBulk: true}, func(b kvBatch) (func(), error) {
		if err := t.deleteRows(b); err != nil {
			return nil, err
		}
		size, err := t.size(b)
		if err != nil {
			return nil, err
		}
		forget := func() { t.s.tcache.clear(t.cache) }
		return forget, t.addSize(b, -size)
	})
	if err != nil {
		return fmt.Errorf("table %s: reset: %w", t.spec.Name, err)
	}
	t.s.log.Info("docstore table reset", "table", t.spec.Name)
	return nil
}

// deleteRows deletes the table's documents, checkpoints, members keys and
// index entries in b (range deletions).
func (t *table) deleteRows(b kvBatch) error {
	for _, prefix := range [][]byte{t.l.docs, t.l.family(tabCheckpoint), t.l.family(tabMembers), t.l.family(tabIndex)} {
		if err := b.delRange(prefix, prefixUpper(prefix)); err != nil {
			return err
		}
	}
	return nil
}

// ScanPartition calls fn for each document of partition p, in key order,
// listed from one snapshot and loaded in chunks without holding one while
// fn runs, so fn may use the store; a document deleted or moved meanwhile
// is skipped. It stops at fn's first error and returns it.
func (t *table) ScanPartition(ctx context.Context, p int32, fn func(engine.Doc) error) error {
	var members [][]byte
	err := t.read(ctx, func(r kvReader, _ uint64) error {
		var err error
		members, err = t.memberKeys(r, p)
		return err
	})
	if err != nil {
		return fmt.Errorf("table %s: scan partition %d: %w", t.spec.Name, p, err)
	}
	for keys := range slices.Chunk(members, scanChunk) {
		docs, err := t.Load(ctx, keys)
		if err != nil {
			return fmt.Errorf("table %s: scan partition %d: %w", t.spec.Name, p, err)
		}
		for _, k := range keys {
			if d, ok := docs[string(k)]; ok && d.Partition == p {
				if err := fn(d); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// tableBatchSize estimates the bytes Apply writes for b: per document its
// value, its key three times (document, members entry, batch record) and,
// per index, the old entry's deletion and the new entry.
func tableBatchSize(b engine.DocBatch) int {
	n := 0
	for _, d := range b.Docs {
		n += len(d.Value) + 3*len(d.Key) + 64 + len(d.Index)*2*(len(d.Key)+48)
	}
	return n
}
