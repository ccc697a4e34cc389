package moviedoc

import (
	"math"
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/keepstate/keepstate/engine"
	d "github.com/ostafen/clover/v2/document"
)

var canonicalUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestDocIDIsCanonicalAndOrdered(t *testing.T) {
	ids := []int64{math.MinInt64, math.MinInt64 + 1, -362, -1, 0, 1, 362, 1 << 40, math.MaxInt64}
	seen := map[string]int64{}
	for i, id := range ids {
		got := DocID(id)
		if !canonicalUUID.MatchString(got) {
			t.Fatalf("DocID(%d) = %q; want a canonical 36-character UUID", id, got)
		}
		if prev, dup := seen[got]; dup {
			t.Fatalf("DocID(%d) = DocID(%d) = %q", id, prev, got)
		}
		seen[got] = id
		if i > 0 && DocID(ids[i-1]) >= got {
			t.Fatalf("DocID(%d) = %q does not sort after DocID(%d) = %q", id, got, ids[i-1], DocID(ids[i-1]))
		}
	}
}

func TestRankKeyOrderMatchesCursorOrder(t *testing.T) {
	avgs := []float64{math.Inf(-1), -1e300, -2.5, -5e-324, math.Copysign(0, -1), 0, 5e-324, 1.0 / 3, 2.5, 7.5, 8, 9.999999999999998, 10, 1e300, math.Inf(1)}
	ids := []int64{math.MinInt64, -2, -1, 0, 1, 2, math.MaxInt64}
	var cs []engine.Cursor
	for _, a := range avgs {
		for _, id := range ids {
			cs = append(cs, engine.Cursor{Avg: a, MovieID: id})
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		cs = append(cs, engine.Cursor{Avg: r.NormFloat64() * 5, MovieID: r.Int64() - math.MaxInt64/2})
	}
	for _, a := range cs {
		ka := RankKey(a.Avg, a.MovieID)
		if len(ka) != 32 {
			t.Fatalf("RankKey(%v, %d) has length %d; want 32", a.Avg, a.MovieID, len(ka))
		}
		for _, b := range cs {
			kb := RankKey(b.Avg, b.MovieID)
			if got, want := ka < kb, a.Before(b); got != want {
				t.Fatalf("RankKey(%v,%d) < RankKey(%v,%d) = %v; want %v (cursor order)", a.Avg, a.MovieID, b.Avg, b.MovieID, got, want)
			}
		}
	}
}

func TestDocumentRoundTrip(t *testing.T) {
	cases := []engine.MovieStats{
		{MovieID: 1, Partition: 3, Count: 1, Sum: 0, Version: 0},
		{MovieID: -9, Partition: 0, Count: 200, Sum: -1.25, Version: 1 << 50, Sources: map[int32]int64{0: 1, 7: 1 << 40, 300: 2}},
		{MovieID: math.MaxInt64, Partition: math.MaxInt32, Count: math.MaxInt64, Sum: 1e300, Version: math.MaxInt64,
			Sources: map[int32]int64{math.MaxInt32: math.MaxInt64, 1: math.MinInt64}},
	}
	for _, want := range cases {
		data, err := d.Encode(ToDocument(want)) // the bytes Clover stores
		if err != nil {
			t.Fatalf("encode %+v: %v", want, err)
		}
		doc, err := d.Decode(data)
		if err != nil {
			t.Fatalf("decode %+v: %v", want, err)
		}
		got, err := FromDocument(doc)
		if err != nil {
			t.Fatalf("FromDocument(decoded %+v): %v", want, err)
		}
		if got.MovieID != want.MovieID || got.Partition != want.Partition || got.Count != want.Count ||
			got.Sum != want.Sum || got.Version != want.Version || len(got.Sources) != len(want.Sources) {
			t.Fatalf("round trip = %+v; want %+v", got, want)
		}
		for k, v := range want.Sources {
			if got.Sources[k] != v {
				t.Fatalf("round trip sources = %v; want %v", got.Sources, want.Sources)
			}
		}
	}
}
