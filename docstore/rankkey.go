package docstore

import (
	"errors"

	"github.com/google/orderedcode"
	"github.com/keepstate/keepstate/internal/moviedoc"
	"github.com/ostafen/clover/v2/index"
	"github.com/ostafen/clover/v2/store"
)

// rankIndexPrefix is the prefix of Clover's keys for the rank index's
// string values (collection, field and value type), learned once from
// Clover's own index code so that it follows Clover's format.
var rankIndexPrefix = learnRankPrefix()

// rankEntry returns Clover's key of the rank index entry of (avg, movie),
// without the store's namespace byte: the prefix, the ordered encoding of
// the rank string and the document id, as Clover's rangeIndex.Add builds
// it (TestRankEntryMatchesClover pins it), without its fmt.Sprintf and
// reflection per call, and without allocating when buf has room: the rank
// string is hex, so its ordered encoding is its bytes and the terminator
// (orderedcode escapes only 0x00 and 0xff).
func rankEntry(buf []byte, avg float64, movie int64) []byte {
	buf = append(buf, rankIndexPrefix...)
	buf = moviedoc.AppendRankKey(buf, avg, movie)
	buf = append(buf, rankTerminator...)
	return moviedoc.AppendDocID(buf, movie)
}

// rankTerminator ends a string in orderedcode's encoding.
var rankTerminator = func() []byte {
	b, _ := orderedcode.Append(nil, "") // a string never fails
	return b
}()

// learnRankPrefix asks Clover's index for the key of an empty rank string
// and strips the value's encoding and the id.
func learnRankPrefix() []byte {
	tx := &captureTx{}
	idx := index.CreateIndex(collection, fieldRank, index.IndexSingleField, tx)
	id := moviedoc.DocID(0)
	if err := idx.Add(id, "", 0); err != nil || len(tx.key) < len(id)+2 {
		panic("docstore: clover rank index key format changed") // init-time invariant, not input
	}
	empty, _ := orderedcode.Append(nil, "")
	return tx.key[:len(tx.key)-len(id)-len(empty)]
}

// captureTx is a store.Tx that records the last key set.
type captureTx struct{ key []byte }

var errCapture = errors.New("capture only")

func (c *captureTx) Set(key, _ []byte) error           { c.key = append([]byte(nil), key...); return nil }
func (c *captureTx) Get([]byte) ([]byte, error)        { return nil, errCapture }
func (c *captureTx) Delete([]byte) error               { return errCapture }
func (c *captureTx) Cursor(bool) (store.Cursor, error) { return nil, errCapture }
func (c *captureTx) Commit() error                     { return nil }
func (c *captureTx) Rollback() error                   { return nil }
