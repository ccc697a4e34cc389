package docstore

import (
	"bytes"
	"context"
	"testing"

	"github.com/ostafen/clover/v2"
)

// rawState is what the engine holds, counted key by key.
type rawState struct {
	docs, rankEntries, members, size int
	docIDs, rankIDs                  map[string]bool
}

// rawCounts reads Clover's keys directly (documents, rank index entries,
// collection metadata) and the members keys.
func (s *Store) rawCounts() (rawState, error) {
	st := rawState{docIDs: map[string]bool{}, rankIDs: map[string]bool{}}
	rankPrefix := []byte("c:" + collection + ";i:" + fieldRank + ";")
	err := s.view(context.Background(), func(r kvReader, _ *clover.DB) error {
		it, err := r.iter(nil, nil, false)
		if err != nil {
			return err
		}
		defer it.close()
		for ok := it.seek(nil); ok; ok = it.next() {
			k := it.key()
			switch {
			case k[0] == nsMembers:
				st.members++
			case k[0] != nsClover:
			case bytes.HasPrefix(k[1:], docKeyPrefix):
				st.docs++
				st.docIDs[string(k[1+len(docKeyPrefix):])] = true
			case bytes.HasPrefix(k[1:], rankPrefix):
				st.rankEntries++
				st.rankIDs[string(k[len(k)-36:])] = true
			}
		}
		st.size, err = collectionSize(r)
		return err
	})
	return st, err
}

// TestRawCountsSeeEveryKind guards rawCounts itself: after one write it
// must count one of each kind, or checkIndexAgrees proves nothing.
func TestRawCountsSeeEveryKind(t *testing.T) {
	s := openTemp(t, WithFsync(false))
	defer s.Close()
	fill(t, s, 3, 10)
	st, err := s.rawCounts()
	if err != nil {
		t.Fatal(err)
	}
	if st.docs != 3 || st.rankEntries != 3 || st.members != 3 || st.size != 3 {
		t.Fatalf("raw counts %+v; want 3 of each", st)
	}
}
