package docstore

import (
	"bytes"
	"math"
	"reflect"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
	d "github.com/ostafen/clover/v2/document"
	"github.com/ostafen/clover/v2/index"
)

// TestEncodeMatchesClover pins docEncoder to Clover: its bytes decode to
// exactly the fields (values and Go types) that Clover's own encoding of
// moviedoc.ToDocument(m) decodes to.
func TestEncodeMatchesClover(t *testing.T) {
	enc := newDocEncoder()
	for _, m := range []engine.MovieStats{
		{MovieID: 1, Partition: 0, Count: 1, Sum: 5, Version: 1},
		{MovieID: -362, Partition: 7, Count: 3, Sum: 10, Version: 1 << 40, Sources: map[int32]int64{0: 9, 2: -1, 11: 1 << 50}},
		{MovieID: math.MaxInt64, Partition: math.MaxInt32, Count: math.MaxInt64, Sum: -1e300, Version: math.MaxInt64, Sources: map[int32]int64{}},
		{MovieID: math.MinInt64, Partition: 3, Count: 127, Sum: 0.1, Version: 128, Sources: map[int32]int64{-5: 300}},
	} {
		got, err := enc.encode(m)
		if err != nil {
			t.Fatal(err)
		}
		gotDoc, err := d.Decode(got)
		if err != nil {
			t.Fatalf("movie %d: decode ours: %v", m.MovieID, err)
		}
		raw, err := d.Encode(moviedoc.ToDocument(m))
		if err != nil {
			t.Fatal(err)
		}
		wantDoc, err := d.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := gotDoc.AsMap(), wantDoc.AsMap(); !reflect.DeepEqual(g, w) {
			t.Fatalf("movie %d:\n got %#v\nwant %#v", m.MovieID, g, w)
		}
		back, err := moviedoc.FromDocument(gotDoc)
		if err != nil || back.Version != m.Version || back.Count != m.Count || back.Sum != m.Sum || back.Partition != m.Partition {
			t.Fatalf("movie %d round trip = %+v, %v", m.MovieID, back, err)
		}
	}
}

// TestRankEntryMatchesClover pins rankEntry to the key Clover's own range
// index writes for the same document and value.
func TestRankEntryMatchesClover(t *testing.T) {
	for _, c := range []struct {
		avg   float64
		movie int64
	}{{0, 1}, {10, 362}, {7.35, -5}, {math.Inf(1), math.MaxInt64}, {-3, math.MinInt64}} {
		tx := &captureTx{}
		idx := index.CreateIndex(collection, fieldRank, index.IndexSingleField, tx)
		if err := idx.Add(moviedoc.DocID(c.movie), moviedoc.RankKey(c.avg, c.movie), 0); err != nil {
			t.Fatal(err)
		}
		if got := rankEntry(nil, c.avg, c.movie); !bytes.Equal(got, tx.key) {
			t.Fatalf("rankEntry(%v, %d) = %q; Clover writes %q", c.avg, c.movie, got, tx.key)
		}
	}
}
