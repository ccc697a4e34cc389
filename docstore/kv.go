package docstore

import "encoding/binary"

// The store keeps everything in one ordered key space, split by a one-byte
// namespace prefix. 'b', 'e' and 'm' hold the movie layout's checkpoints,
// epochs and members, for the migration (migrate.go) alone.
const (
	nsMeta   byte = 'a' // format marker, migration record
	nsTables byte = 't' // tables' specs, epochs, checkpoints, members, index entries (table_layout.go)
	nsClover byte = 'z' // Clover's own keys (documents, metadata)
)

// kv is the ordered key-value engine under the store: Pebble in
// production (pebbleKV). Writes are serialized by the Store; reads run
// concurrently on snapshots.
type kv interface {
	snapshot() kvReader // a consistent read view of the committed state
	// batch returns an empty write batch whose reads see the committed
	// state plus its own writes.
	batch() kvBatch
	// writeBatch returns an empty write batch whose reads see the
	// committed state only, not its own writes: cheaper, for callers that
	// never read what they wrote, under the Store's write lock. size is
	// the expected size in bytes (0 when unknown), allocated up front.
	writeBatch(size int) kvBatch
	// close closes the engine, first flushing its memtables when flush is set.
	close(flush bool) error
}

// kvReader reads one consistent view. get returns nil for a missing key;
// the returned slice is only valid until the next call on the reader.
type kvReader interface {
	get(key []byte) ([]byte, error)
	iter(lower, upper []byte, reverse bool) (kvIter, error) // over [lower, upper)
	release()
}

// kvIter walks keys in order (or in reverse). seek positions at the first
// key >= k (forward) or the last key <= k (reverse); next steps in the
// iterator's direction. key and value are valid until the next call.
type kvIter interface {
	seek(k []byte) bool
	seekExact(k []byte) bool // positions at k and reports whether it exists (forward)
	next() bool
	valid() bool
	key() []byte
	value() []byte
	err() error // the error a positioning call met (it then reported no key)
	close() error
}

// closeInto closes it and, when *err is nil, sets *err to the error the
// iterator met (a failed read ends its keys as if there were no more):
// `defer closeInto(it, &err)`, so that a failed read is never taken for
// absent keys.
func closeInto(it kvIter, err *error) {
	if cerr := it.close(); *err == nil {
		*err = cerr
	}
}

// kvBatch is one atomic write. Nothing is visible to other readers before
// commit; release without commit discards it.
type kvBatch interface {
	kvReader
	set(key, value []byte) error
	del(key []byte) error
	delRange(lower, upper []byte) error // deletes every key in [lower, upper)
	commit(sync bool) error             // atomically; with sync durable on return
}

// nsKey returns key under namespace ns.
func nsKey(ns byte, key []byte) []byte {
	k := make([]byte, 0, 1+len(key))
	return append(append(k, ns), key...)
}

// nsUpper returns the first key after namespace ns.
func nsUpper(ns byte) []byte { return []byte{ns + 1} }

// prefixUpper returns the smallest key greater than every key with prefix.
func prefixUpper(prefix []byte) []byte {
	up := append([]byte(nil), prefix...)
	for i := len(up) - 1; i >= 0; i-- {
		if up[i] < 0xff {
			up[i]++
			return up[:i+1]
		}
	}
	return nil
}

// anyKey reports whether r holds a key in [lower, upper).
func anyKey(r kvReader, lower, upper []byte) (bool, error) {
	it, err := r.iter(lower, upper, false)
	if err != nil {
		return false, err
	}
	found := it.seek(lower)
	return found, it.close()
}

// getInt64 reads an int64 value; ok is false when the key is missing.
func getInt64(r kvReader, key []byte) (int64, bool, error) {
	v, err := r.get(key)
	if err != nil || len(v) != 8 {
		return 0, false, err
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

func int64Value(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
