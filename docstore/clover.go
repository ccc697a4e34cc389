package docstore

import (
	"bytes"
	"errors"
	"slices"
	"sync/atomic"

	"github.com/ostafen/clover/v2/store"
)

// readCounts counts reads, so that tests can prove what a read costs (a
// query served by the index): documents fetched by key, visited by a
// cursor (a collection scan), and other keys a cursor visits.
type readCounts struct {
	writeReads atomic.Int64 // documents read by Apply (table.writeDocs) and ingestions
	ingests    atomic.Int64 // bulk-load buffers written out as ingested files
	docGets    atomic.Int64
	docScans   atomic.Int64
	indexSteps atomic.Int64
}

// isDocKey reports whether k (a Clover key) is a document's:
// "c:<collection>;d:<_id>" (Clover's getDocumentKey; collection names hold
// no ';'), not an index entry's or metadata.
func isDocKey(k []byte) bool {
	rest, ok := bytes.CutPrefix(k, []byte("c:"))
	if !ok {
		return false
	}
	i := bytes.IndexByte(rest, ';')
	return i >= 0 && bytes.HasPrefix(rest[i+1:], []byte("d:"))
}

// cloverStore is a Clover store.Store bound to one kv read view or write
// batch, under the nsClover namespace: every Begin joins it, and Commit
// and Rollback do nothing (the Store decides). Used by one goroutine.
type cloverStore struct {
	r      kvReader
	w      kvBatch // nil for a read view
	counts *readCounts
}

var _ store.Store = (*cloverStore)(nil)

var errReadOnly = errors.New("docstore: write inside a read-only view")

func (s *cloverStore) Begin(update bool) (store.Tx, error) {
	if update && s.w == nil {
		return nil, errReadOnly
	}
	return &cloverTx{s: s}, nil
}

func (s *cloverStore) Close() error { return nil }

// cloverTx is Clover's view of the bound read view or batch.
type cloverTx struct{ s *cloverStore }

func (t *cloverTx) Set(key, value []byte) error {
	if t.s.w == nil {
		return errReadOnly
	}
	return t.s.w.set(nsKey(nsClover, key), value)
}

func (t *cloverTx) Get(key []byte) ([]byte, error) {
	if isDocKey(key) {
		t.s.counts.docGets.Add(1)
	}
	v, err := t.s.r.get(nsKey(nsClover, key))
	if v != nil {
		v = slices.Clone(v) // Clover keeps values across calls
	}
	return v, err
}

func (t *cloverTx) Delete(key []byte) error {
	if t.s.w == nil {
		return errReadOnly
	}
	return t.s.w.del(nsKey(nsClover, key))
}

func (t *cloverTx) Cursor(forward bool) (store.Cursor, error) {
	it, err := t.s.r.iter([]byte{nsClover}, nsUpper(nsClover), !forward)
	if err != nil {
		return nil, err
	}
	return &cloverCursor{it: it, counts: t.s.counts}, nil
}

func (t *cloverTx) Commit() error { return nil }

func (t *cloverTx) Rollback() error { return nil }

// cloverCursor adapts a kv iterator to Clover's cursor (a reverse Seek
// positions on the last key <= the sought key, as Clover's bbolt adapter).
type cloverCursor struct {
	it     kvIter
	counts *readCounts
}

func (c *cloverCursor) count() {
	if !c.it.valid() {
		return
	}
	if isDocKey(c.it.key()[1:]) {
		c.counts.docScans.Add(1)
	} else {
		c.counts.indexSteps.Add(1)
	}
}

func (c *cloverCursor) Seek(seek []byte) error {
	c.it.seek(nsKey(nsClover, seek))
	c.count()
	return nil
}

func (c *cloverCursor) Next() {
	c.it.next()
	c.count()
}

// Valid also reports true when the iterator met an error (a damaged
// block): Clover stops at the first invalid position without asking why,
// so the error is handed over by Item, which Clover calls next.
func (c *cloverCursor) Valid() bool { return c.it.valid() || c.it.err() != nil }

func (c *cloverCursor) Item() (store.Item, error) {
	if err := c.it.err(); err != nil {
		return store.Item{}, err
	}
	return store.Item{Key: slices.Clone(c.it.key()[1:]), Value: slices.Clone(c.it.value())}, nil
}

func (c *cloverCursor) Close() error { return c.it.close() }
