//go:build badger

package docstore

import (
	"testing"

	"bytes"
	"errors"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/storetest"
	"log/slog"
	"os"

	"github.com/dgraph-io/badger/v4"
)

// badgerKV is the kv engine on Badger v4, the other candidate measured
// against Pebble (BenchmarkEngines). Test-only: the store ships on Pebble.
// Badger has no range tombstones in a transaction, so delRange deletes key
// by key.
type badgerKV struct{ db *badger.DB }

// withBadger runs the store on Badger with the same memory bounds, except
// the memtable: Badger refuses a transaction above 15% of it, and a
// 10,000-document batch needs 64 MiB.
func withBadger() Option {
	return func(o *options) {
		o.openKV = func(path string, o options, _ *slog.Logger, mustExist bool) (kv, error) {
			if mustExist {
				if _, err := os.Stat(path); err != nil {
					return nil, err
				}
			}
			opts := badger.DefaultOptions(path).
				WithLogger(nil).
				WithSyncWrites(false). // commit syncs explicitly when asked
				WithDetectConflicts(false).
				WithBlockCacheSize(o.cacheBytes).
				WithIndexCacheSize(o.cacheBytes / 2).
				WithMemTableSize(max(o.memtableBytes, 64<<20)).
				WithNumVersionsToKeep(1)
			db, err := badger.Open(opts)
			if err != nil {
				return nil, err
			}
			return &badgerKV{db: db}, nil
		}
	}
}

func (k *badgerKV) snapshot() kvReader     { return &badgerTxn{db: k.db, txn: k.db.NewTransaction(false)} }
func (k *badgerKV) batch() kvBatch         { return &badgerTxn{db: k.db, txn: k.db.NewTransaction(true)} }
func (k *badgerKV) writeBatch(int) kvBatch { return k.batch() }
func (k *badgerKV) close(bool) error       { return k.db.Close() }

type badgerTxn struct {
	db  *badger.DB
	txn *badger.Txn
	buf []byte
}

func (t *badgerTxn) get(key []byte) ([]byte, error) {
	item, err := t.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t.buf, err = item.ValueCopy(t.buf[:0])
	if t.buf == nil {
		t.buf = []byte{}
	}
	return t.buf, err
}

func (t *badgerTxn) iter(lower, upper []byte, reverse bool) (kvIter, error) {
	it := t.txn.NewIterator(badger.IteratorOptions{Reverse: reverse, PrefetchValues: false})
	return &badgerIter{it: it, lower: lower, upper: upper, reverse: reverse}, nil
}

func (t *badgerTxn) release() { t.txn.Discard() }

func (t *badgerTxn) set(key, value []byte) error {
	return t.txn.Set(bytes.Clone(key), bytes.Clone(value))
}

func (t *badgerTxn) del(key []byte) error { return t.txn.Delete(bytes.Clone(key)) }

func (t *badgerTxn) delRange(lower, upper []byte) error {
	it := t.txn.NewIterator(badger.IteratorOptions{PrefetchValues: false})
	var keys [][]byte
	for it.Seek(lower); it.Valid() && (upper == nil || bytes.Compare(it.Item().Key(), upper) < 0); it.Next() {
		keys = append(keys, it.Item().KeyCopy(nil))
	}
	it.Close()
	for _, k := range keys {
		if err := t.txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

func (t *badgerTxn) commit(sync bool) error {
	if err := t.txn.Commit(); err != nil {
		return err
	}
	if sync {
		return t.db.Sync()
	}
	return nil
}

type badgerIter struct {
	it           *badger.Iterator
	lower, upper []byte
	reverse      bool
}

func (i *badgerIter) seek(k []byte) bool {
	switch {
	case !i.reverse && bytes.Compare(k, i.lower) < 0:
		k = i.lower
	case i.reverse && i.upper != nil && bytes.Compare(k, i.upper) >= 0:
		i.it.Seek(i.upper) // last key <= upper; step back if it is upper itself
		if i.it.Valid() && bytes.Equal(i.it.Item().Key(), i.upper) {
			i.it.Next()
		}
		return i.valid()
	}
	i.it.Seek(k)
	return i.valid()
}

func (i *badgerIter) next() bool { i.it.Next(); return i.valid() }

func (i *badgerIter) valid() bool {
	if !i.it.Valid() {
		return false
	}
	k := i.it.Item().Key()
	return bytes.Compare(k, i.lower) >= 0 && (i.upper == nil || bytes.Compare(k, i.upper) < 0)
}

func (i *badgerIter) key() []byte { return i.it.Item().Key() }

func (i *badgerIter) value() []byte {
	v, err := i.it.Item().ValueCopy(nil)
	if err != nil {
		return nil
	}
	return v
}

func (i *badgerIter) err() error   { return nil }
func (i *badgerIter) close() error { i.it.Close(); return nil }

// badgerCandidates adds Badger to BenchmarkEngines (built with -tags badger).
var badgerCandidates = []engineCandidate{{"badger", []Option{withBadger()}}}

// TestConformanceBadger runs the suite on the Badger candidate, so that
// BenchmarkEngines compares two correct stores.
func TestConformanceBadger(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	storetest.Run(t, func(t *testing.T) engine.Store { return openTemp(t, WithFsync(false), withBadger()) })
}
