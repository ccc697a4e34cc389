package docstore

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestOpenUpgradesV2Store opens a store whose marker is format v2, whose
// members keys hold values (a version and index values, as v2 wrote them,
// here wrong ones): Open rewrites the marker to v3, and writes and a drop
// go by the documents, ignoring those values. A marker of an unknown
// format is refused with ErrNotStore.
func TestOpenUpgradesV2Store(t *testing.T) {
	const n = 100
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	docs := func(version int64) map[int32][]engine.Doc {
		out := map[int32][]engine.Doc{}
		for i := range n {
			p := int32(i % 2)
			out[p] = append(out[p], orderDoc(i, p, version))
		}
		return out
	}
	tb := mustTable(t, s, ordersSpec)
	for p, ds := range docs(1) {
		applyDocs(t, tb, p, 1, ds...)
	}
	setRaw := func(s *Store, k, v []byte) {
		t.Helper()
		b := s.kv.batch()
		defer b.release()
		if err := b.set(k, v); err != nil {
			t.Fatal(err)
		}
		if err := b.commit(true); err != nil {
			t.Fatal(err)
		}
	}
	// What a v2 binary wrote, with values that no longer hold.
	for p, ds := range docs(1) {
		for _, d := range ds {
			v := binary.BigEndian.AppendUint64(nil, 99)
			v = binary.BigEndian.AppendUint64(v, math.Float64bits(d.Index[0].Num+100))
			setRaw(s, tb.l.memberKey(p, d.Key), v)
		}
	}
	setRaw(s, formatKey, []byte(formatVersionV2))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	if s, err = Open(dir, WithFsync(false)); err != nil {
		t.Fatalf("Open of a v2 store: %v", err)
	}
	if marker := rawKeys(t, s, formatKey)[string(formatKey)]; marker != formatVersion {
		t.Fatalf("marker after Open = %q; want %q", marker, formatVersion)
	}
	tb = mustTable(t, s, ordersSpec)
	<-tb.cache.warmed
	s.wmu.Lock()
	s.tcache.clear(tb.cache) // writes and the drop read the documents
	s.wmu.Unlock()
	for p, ds := range docs(2) {
		applyDocs(t, tb, p, 2, ds...)
	}
	if err := tb.DropPartition(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wantTableDocs(t, s, tb, docs(2)[0])
	for _, d := range docs(2)[1] {
		if got, err := tb.Get(ctx, d.Key); !errors.Is(err, engine.ErrNotFound) {
			t.Fatalf("Get(%q) of the dropped partition = %+v, %v; want ErrNotFound", d.Key, got, err)
		}
	}
	setRaw(s, formatKey, []byte("keepstate-docstore v9 (from the future)"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, WithFsync(false)); !errors.Is(err, ErrNotStore) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("Open of an unknown format = %v; want ErrNotStore", err)
	}
}
