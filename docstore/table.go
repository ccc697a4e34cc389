package docstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/keepstate/keepstate/engine"
	"github.com/ostafen/clover/v2"
)

var _ engine.Tables = (*Store)(nil)

var (
	_ engine.Table         = (*table)(nil)
	_ engine.TableScanner  = (*table)(nil)
	_ engine.TableResetter = (*table)(nil)
	_ engine.InstanceLocal = (*table)(nil)
)

// table is one table of a Store (see table_layout.go for its keys); its
// handles are interchangeable (all state is in the store and its shared
// write cache). Safe for concurrent use; closed with the store.
type table struct {
	s     *Store
	spec  engine.TableSpec
	l     tableLayout
	cache *tableCache // shared by its handles (guarded by s.wmu, but for its removal count)
}

// OpenTable opens the table of spec, creating it (its Clover collection
// and its persisted spec, in one batch) when new. Reopening a table with
// other indexes (names, kinds or order) fails with engine.ErrInvalid.
// TiesAscending is not persisted: it changes only how descending queries
// walk the index entries.
func (s *Store) OpenTable(ctx context.Context, spec engine.TableSpec) (engine.Table, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("open table: %w", err)
	}
	spec.Indexes = slices.Clone(spec.Indexes)
	t := &table{s: s, spec: spec, l: newTableLayout(spec.Name)}
	specKey := t.l.family(tabSpec)
	var found bool
	check := func(r kvReader) error {
		raw, err := r.get(specKey)
		if found = raw != nil; err != nil || !found {
			return err
		}
		return t.sameSpec(raw)
	}
	err := s.tableRead(ctx, check)
	if err == nil && !found {
		err = s.tableWrite(ctx, tableWriteOp{sync: s.sync}, func(b kvBatch) (func(), error) {
			if err := check(b); err != nil || found { // created meanwhile
				return nil, err
			}
			return nil, t.create(b)
		})
	}
	if err != nil {
		return nil, fmt.Errorf("open table %s: %w", spec.Name, err)
	}
	s.wmu.Lock()
	tc, fresh := s.tcache.open(spec.Name, s.bulkMax)
	s.wmu.Unlock()
	t.cache = tc
	if !found {
		s.log.Info("docstore table created", "table", spec.Name, "indexes", specString(spec.Indexes))
	}
	if fresh {
		go t.warm() // the first handle of the table in this store
	}
	return t, nil
}

// storedSpec is the persisted form of a table's spec.
type storedSpec struct {
	Name    string        `json:"name"`
	Indexes []storedIndex `json:"indexes"`
}

type storedIndex struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
}

func specJSON(spec engine.TableSpec) ([]byte, error) {
	st := storedSpec{Name: spec.Name, Indexes: make([]storedIndex, len(spec.Indexes))}
	for i, ix := range spec.Indexes {
		st.Indexes[i] = storedIndex{Name: ix.Name, Kind: ix.Kind.String()}
	}
	return json.Marshal(st)
}

// specString formats indexes as "[name:kind ...]".
func specString(ixs []engine.IndexSpec) string {
	parts := make([]string, len(ixs))
	for i, ix := range ixs {
		parts[i] = ix.Name + ":" + ix.Kind.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// sameSpec checks the persisted spec raw against t's.
func (t *table) sameSpec(raw []byte) error {
	want, err := specJSON(t.spec)
	if err != nil {
		return err
	}
	if bytes.Equal(raw, want) {
		return nil
	}
	var st storedSpec
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("stored spec %q: %w", raw, err)
	}
	stored := make([]string, len(st.Indexes))
	for i, ix := range st.Indexes {
		stored[i] = ix.Name + ":" + ix.Kind
	}
	return fmt.Errorf("table %s exists with indexes [%s], opened with indexes %s; a table's indexes cannot change: %w",
		t.spec.Name, strings.Join(stored, " "), specString(t.spec.Indexes), engine.ErrInvalid)
}

// create writes a new table's Clover collection and spec into b (an
// indexed batch: Clover reads what it writes).
func (t *table) create(b kvBatch) error {
	cdb, err := clover.OpenWithStore(&cloverStore{r: b, w: b, counts: &readCounts{}})
	if err != nil {
		return err
	}
	err = cdb.CreateCollection(tableCollection(t.spec.Name))
	if err != nil && !errors.Is(err, clover.ErrCollectionExist) {
		return fmt.Errorf("create collection: %w", err)
	}
	raw, err := specJSON(t.spec)
	if err != nil {
		return err
	}
	return b.set(t.l.family(tabSpec), raw)
}

// tableRead runs fn on a snapshot of the committed state, without writing
// out a buffered bulk load (table.read does, for its table).
func (s *Store) tableRead(ctx context.Context, fn func(r kvReader) error) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	snap := s.kv.snapshot()
	defer snap.release()
	return s.corrupt(fn(snap))
}

// read runs fn on a snapshot of the committed state that holds every
// batch Apply accepted (a buffered bulk load is written out first); seq
// is the table cache's sequence number read just before the snapshot
// (tableCaches.serve).
func (t *table) read(ctx context.Context, fn func(r kvReader, seq uint64) error) error {
	s := t.s
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := s.corrupt(t.flushBuffered()); err != nil {
		return err
	}
	seq := t.cache.seq.Load()
	snap := s.kv.snapshot()
	defer snap.release()
	return s.corrupt(fn(snap, seq))
}

// tableWriteOp says how tableWrite writes its batch.
type tableWriteOp struct {
	blind bool // kv.writeBatch (of size bytes expected), for fn that never reads what it wrote
	size  int
	sync  bool // durable on return
	// cache is the write cache of the table written (nil while creating
	// it): its buffered bulk load is written out first, and it answers no
	// Load until the batch is in it (tableCaches.serve).
	cache   *tableCache
	endBulk bool // ends the table's bulk load (a write of its documents)
}

// tableWrite runs fn with one write batch, under the store's write lock
// and disk guard, and commits it when fn returns nil; then runs after, if
// fn returned one, still under the write lock.
func (s *Store) tableWrite(
	ctx context.Context, op tableWriteOp, fn func(b kvBatch) (after func(), err error),
) (err error) {
	defer func() { err = s.corrupt(err) }() // once the locks are released
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	defer s.drainLearnt() // under wmu, after the batch and its after (Store.underWriteLock)
	if err := s.guard.check(); err != nil {
		return err
	}
	if op.cache != nil {
		// The table's buffered bulk load goes first.
		end := s.materializeTable
		if op.endBulk {
			end = s.endTableBulk
		}
		if err := end(op.cache); err != nil {
			return err
		}
	}
	var b kvBatch
	if op.blind {
		b = s.kv.writeBatch(op.size)
	} else {
		b = s.kv.batch()
	}
	defer b.release()
	after, err := fn(b)
	if err != nil {
		return err
	}
	if op.cache != nil {
		op.cache.begin()
		defer op.cache.end()
	}
	if err := b.commit(op.sync); err != nil {
		s.tcache.clearAll() // the batch may have been written after all
		return fmt.Errorf("commit: %w", err)
	}
	if after != nil {
		after()
	}
	return nil
}

// InstanceLocal reports true for a table too: its documents are those of
// the partitions this instance owns (or owned), so the engine answers only
// partitions RUNNING here and routes the others to their owner.
func (t *table) InstanceLocal() bool { return true }

// Spec returns the table's spec.
func (t *table) Spec() engine.TableSpec {
	spec := t.spec
	spec.Indexes = slices.Clone(spec.Indexes)
	return spec
}

// Claim makes the caller the writer of partition p and returns its new
// epoch, one more than the last claimed in this table (the first is 1).
func (t *table) Claim(ctx context.Context, p int32) (int64, error) {
	key := t.l.partKey(tabEpochs, p)
	var epoch int64
	// Written after the batches the bulk load buffered (the load goes on).
	// Not synced (a restore claims every partition it takes): the log keeps
	// batches in order, so the first synced write under the new epoch makes
	// the claim durable too, and a claim a power loss drops takes every
	// write made under it along, so the next claim is still above every
	// epoch a stored write has.
	op := tableWriteOp{blind: true, cache: t.cache}
	err := t.s.tableWrite(ctx, op, func(b kvBatch) (func(), error) {
		last, _, err := getInt64(b, key)
		if err != nil {
			return nil, err
		}
		epoch = last + 1
		return nil, b.set(key, int64Value(epoch))
	})
	if err != nil {
		return 0, fmt.Errorf("table %s: claim partition %d: %w", t.spec.Name, p, err)
	}
	return epoch, nil
}

// checkClaim returns ErrFenced unless epoch is the current claim of p.
func (t *table) checkClaim(r kvReader, p int32, epoch int64) error {
	claimed, ok, err := getInt64(r, t.l.partKey(tabEpochs, p))
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: epoch %d, but the partition has no claim (table reset or lost?)", engine.ErrFenced, epoch)
	case epoch != claimed:
		return fmt.Errorf("%w: epoch %d, partition claimed with epoch %d", engine.ErrFenced, epoch, claimed)
	}
	return nil
}

// Checkpoint returns the next changelog offset to read for partition p.
func (t *table) Checkpoint(ctx context.Context, p int32) (next int64, ok bool, err error) {
	err = t.read(ctx, func(r kvReader, _ uint64) error {
		next, ok, err = getInt64(r, t.l.partKey(tabCheckpoint, p))
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("table %s: checkpoint of partition %d: %w", t.spec.Name, p, err)
	}
	return next, ok, nil
}

// Get returns the document of key (one key read), or ErrNotFound.
func (t *table) Get(ctx context.Context, key []byte) (engine.Doc, error) {
	var doc engine.Doc
	err := t.read(ctx, func(r kvReader, _ uint64) error {
		t.s.counts.docGets.Add(1)
		raw, err := r.get(t.l.docKey(nil, key))
		if err != nil {
			return err
		}
		if raw == nil {
			return engine.ErrNotFound
		}
		doc, err = decodeTableDoc(raw, t.spec, false)
		return err
	})
	if err != nil {
		return engine.Doc{}, fmt.Errorf("table %s: get key %s: %w", t.spec.Name, keyString(key), err)
	}
	return doc, nil
}

// keyString formats a key for messages: quoted, cut after 64 bytes.
func keyString(key []byte) string {
	if len(key) > 64 {
		return fmt.Sprintf("%q...", key[:64])
	}
	return fmt.Sprintf("%q", key)
}

// Load returns the stored documents of keys by string(key), all as of one
// committed state: the write cache answers for the keys it holds whole
// (tableCaches.serve), the others are read from one snapshot, and go to
// the write cache (learn), so that the next Apply of them reads nothing.
func (t *table) Load(ctx context.Context, keys [][]byte) (map[string]engine.Doc, error) {
	before := t.cache.removals.count() // before the snapshot (learn)
	out := make(map[string]engine.Doc, len(keys))
	var read [][]byte
	err := t.read(ctx, func(r kvReader, seq uint64) error {
		read = t.s.tcache.serve(t.cache, t.spec, seq, sortedKeys(keys), out)
		return t.readDocs(r, read, func(_ int, raw []byte) error {
			doc, err := decodeTableDoc(raw, t.spec, false)
			if err == nil {
				out[string(doc.Key)] = doc
			}
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("table %s: load %d keys: %w", t.spec.Name, len(keys), err)
	}
	t.learn(before, read, out)
	return out, nil
}

// sortedKeys returns keys sorted, without repeats (a new slice; the keys
// themselves are shared).
func sortedKeys(keys [][]byte) [][]byte {
	out := slices.Clone(keys)
	slices.SortFunc(out, bytes.Compare)
	return slices.CompactFunc(out, bytes.Equal)
}

// readDocs calls fn with the stored document of each of keys (sorted,
// without repeats) that has one, and its position in keys: point reads,
// or from seekLoadMin keys on the seeks of one iterator (document keys
// sort like keys). raw is valid until fn returns.
func (t *table) readDocs(r kvReader, keys [][]byte, fn func(i int, raw []byte) error) (err error) {
	if len(keys) == 0 {
		return nil
	}
	var buf []byte
	var it kvIter
	if len(keys) >= seekLoadMin {
		upper := append(t.l.docKey(nil, keys[len(keys)-1]), 0)
		if it, err = r.iter(t.l.docKey(nil, keys[0]), upper, false); err != nil {
			return err
		}
		defer closeInto(it, &err)
	}
	for i, k := range keys {
		t.s.counts.docGets.Add(1)
		buf = t.l.docKey(buf[:0], k)
		var raw []byte
		if it == nil {
			if raw, err = r.get(buf); err != nil {
				return err
			}
		} else if it.seekExact(buf) {
			raw = it.value()
		}
		if raw != nil {
			if err := fn(i, raw); err != nil {
				return err
			}
		}
	}
	return nil
}
