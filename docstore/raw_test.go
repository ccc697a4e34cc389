package docstore

import (
	"testing"
)

// TestRawTableStateSeesEveryKind guards rawTableState itself, on which
// the fault tests rely: after one write it counts one of each kind, and a
// missing index entry, members key or document makes it fail.
func TestRawTableStateSeesEveryKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  func(tb *table) []byte // deleted before the check; nil: none
	}{
		{"whole", nil},
		{"an index entry missing", func(tb *table) []byte {
			d := orderDoc(1, 0, 1)
			return tb.l.indexEntry(nil, 1, d.Index[1], ordersSpec.Indexes[1].Kind, d.Key)
		}},
		{"a members key missing", func(tb *table) []byte { return tb.l.memberKey(0, orderDoc(2, 0, 1).Key) }},
		{"a document missing", func(tb *table) []byte { return tb.l.docKey(nil, orderDoc(0, 0, 1).Key) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTemp(t, WithFsync(false))
			defer s.Close()
			tb := mustTable(t, s, ordersSpec)
			fillTable(t, tb, 3, 10)
			if tc.key == nil {
				st, err := rawTableState(s, tb)
				if err != nil || st.docs != 3 || st.members != 3 || st.size != 3 || st.entries[0] != 3 || st.entries[1] != 3 {
					t.Fatalf("rawTableState = %+v, %v; want 3 of each", st, err)
				}
				return
			}
			b := s.kv.batch()
			defer b.release()
			if err := b.del(tc.key(tb)); err != nil {
				t.Fatal(err)
			}
			if err := b.commit(false); err != nil {
				t.Fatal(err)
			}
			if st, err := rawTableState(s, tb); err == nil {
				t.Fatalf("rawTableState = %+v, nil; want an error", st)
			}
		})
	}
}
