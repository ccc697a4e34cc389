package docstore

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/ostafen/clover/v2"
	"go.etcd.io/bbolt"
)

// rawState is what the bbolt file holds, counted key by key.
type rawState struct {
	docs, rankEntries, members, size int
	docIDs, rankIDs                  map[string]bool
}

// rawCounts reads Clover's keys directly (documents, rank index entries,
// collection metadata) and the members bucket.
func (s *Store) rawCounts() (rawState, error) {
	st := rawState{docIDs: map[string]bool{}, rankIDs: map[string]bool{}}
	rankPrefix := []byte("c:" + collection + ";i:" + fieldRank + ";")
	err := s.view(context.Background(), func(tx *bbolt.Tx, _ *clover.DB) error {
		c := tx.Bucket(cloverBucket).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			switch {
			case bytes.HasPrefix(k, docKeyPrefix):
				st.docs++
				st.docIDs[string(k[len(docKeyPrefix):])] = true
			case bytes.HasPrefix(k, rankPrefix):
				st.rankEntries++
				st.rankIDs[string(k[len(k)-36:])] = true
			}
		}
		var meta struct{ Size int }
		if err := json.Unmarshal(tx.Bucket(cloverBucket).Get([]byte("coll:"+collection)), &meta); err != nil {
			return err
		}
		st.size = meta.Size
		st.members = tx.Bucket(membersBucket).Stats().KeyN
		return nil
	})
	return st, err
}
