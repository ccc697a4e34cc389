package boltstore

import (
	"bytes"
	"errors"
	"slices"
	"sync/atomic"

	"github.com/keepstate/keepstate/internal/moviedoc"
	"github.com/ostafen/clover/v2/store"
	"go.etcd.io/bbolt"
)

// cloverBucket is the bbolt bucket holding Clover's keys (documents,
// indexes, collection metadata).
var cloverBucket = []byte("clover")

// fillPercent is how full bbolt packs the pages it splits (its default is
// half): keys mostly arrive in order (new movies, their members keys) or
// replace same-size values, so fuller pages do not split again soon, and
// a store of half as many pages has fewer branch pages to rewrite per
// random update and caches better.
const fillPercent = 0.9

// readCounts counts what Clover reads through the adapter: documents
// fetched by key, documents visited by a cursor (a collection scan), and
// other keys visited by a cursor (index entries).
type readCounts struct {
	docGets    atomic.Int64
	docScans   atomic.Int64
	indexSteps atomic.Int64
}

// docKeyPrefix is Clover's key prefix of the movies collection's documents
// (Clover's getDocumentKey).
var docKeyPrefix = []byte("c:" + collection + ";d:")

// docKey returns Clover's key of a movie's document.
func docKey(movie int64) []byte {
	return append(slices.Clip(docKeyPrefix), moviedoc.DocID(movie)...)
}

// txStore is a Clover store.Store bound to one open bbolt transaction:
// every Begin joins it, and the returned transaction's Commit and Rollback
// do nothing, so the caller of bbolt's Update or View decides the outcome.
// It is used by one goroutine for the life of its transaction.
type txStore struct {
	tx     *bbolt.Tx
	counts *readCounts
}

var _ store.Store = (*txStore)(nil)

var errReadOnly = errors.New("docstore: write inside a read-only transaction")

// Begin returns a view of the bound transaction.
func (s *txStore) Begin(update bool) (store.Tx, error) {
	if update && !s.tx.Writable() {
		return nil, errReadOnly
	}
	b := s.tx.Bucket(cloverBucket)
	if b == nil {
		return nil, errors.New("docstore: clover bucket missing")
	}
	b.FillPercent = fillPercent
	return &joinedTx{b: b, counts: s.counts}, nil
}

// Close does nothing: the Store owns the bbolt database.
func (s *txStore) Close() error { return nil }

// joinedTx is Clover's view of the bound bbolt transaction.
type joinedTx struct {
	b      *bbolt.Bucket
	counts *readCounts
}

func (t *joinedTx) Set(key, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return t.b.Put(key, value)
}

func (t *joinedTx) Get(key []byte) ([]byte, error) {
	if bytes.HasPrefix(key, docKeyPrefix) {
		t.counts.docGets.Add(1)
	}
	return t.b.Get(key), nil
}

func (t *joinedTx) Delete(key []byte) error { return t.b.Delete(key) }

func (t *joinedTx) Cursor(forward bool) (store.Cursor, error) {
	return &cursor{c: t.b.Cursor(), forward: forward, counts: t.counts}, nil
}

// Commit does nothing: the enclosing bbolt transaction commits.
func (t *joinedTx) Commit() error { return nil }

// Rollback does nothing: the enclosing bbolt transaction decides.
func (t *joinedTx) Rollback() error { return nil }

// cursor adapts a bbolt cursor to Clover's. A reverse Seek positions on
// the last key <= the sought key, like Clover's own bbolt adapter, and on
// the last key of the bucket when every key is smaller.
type cursor struct {
	c       *bbolt.Cursor
	forward bool
	key     []byte
	value   []byte
	counts  *readCounts
}

func (c *cursor) set(k, v []byte) {
	c.key, c.value = k, v
	switch {
	case k == nil:
	case bytes.HasPrefix(k, docKeyPrefix):
		c.counts.docScans.Add(1)
	default:
		c.counts.indexSteps.Add(1)
	}
}

func (c *cursor) Seek(seek []byte) error {
	k, v := c.c.Seek(seek)
	if !c.forward {
		switch {
		case k == nil:
			k, v = c.c.Last()
		case !bytes.Equal(k, seek):
			k, v = c.c.Prev()
		}
	}
	c.set(k, v)
	return nil
}

func (c *cursor) Next() {
	if c.forward {
		c.set(c.c.Next())
	} else {
		c.set(c.c.Prev())
	}
}

func (c *cursor) Valid() bool { return c.key != nil }

func (c *cursor) Item() (store.Item, error) {
	return store.Item{Key: c.key, Value: c.value}, nil
}

func (c *cursor) Close() error { return nil }
