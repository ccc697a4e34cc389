package docstore

import (
	"maps"
	"math"
	"math/rand/v2"
	"testing"

	d "github.com/ostafen/clover/v2/document"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
)

// slowDecode is Clover's decoding path, the reference for decodeMovie.
func slowDecode(t *testing.T, v []byte) engine.MovieStats {
	t.Helper()
	doc, err := d.Decode(v)
	if err != nil {
		t.Fatalf("clover decode: %v", err)
	}
	m, err := moviedoc.FromDocument(doc)
	if err != nil {
		t.Fatalf("FromDocument: %v", err)
	}
	return m
}

func sameMovie(a, b engine.MovieStats) bool {
	return a.MovieID == b.MovieID && a.Partition == b.Partition && a.Count == b.Count &&
		math.Float64bits(a.Sum) == math.Float64bits(b.Sum) && a.Version == b.Version &&
		(a.Sources == nil) == (b.Sources == nil) && maps.Equal(a.Sources, b.Sources)
}

// TestDecodeMovieMatchesClover decodes documents written by the store's
// encoder with the fast path and with Clover's decoder: both must agree on
// every field, for edge values of every integer width.
func TestDecodeMovieMatchesClover(t *testing.T) {
	edges := []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxInt32, math.MaxInt32 + 1, math.MaxInt64, -1, -32, -33, -128, -129, math.MinInt64}
	rng := rand.New(rand.NewPCG(5, 6))
	pick := func() int64 {
		if rng.IntN(2) == 0 {
			return edges[rng.IntN(len(edges))]
		}
		return rng.Int64() >> rng.IntN(64)
	}
	enc := newDocEncoder()
	for i := range 5000 {
		m := engine.MovieStats{MovieID: pick(), Partition: int32(rng.IntN(1000)), Count: pick(), Sum: rng.Float64() * 1e6, Version: pick()}
		switch i % 4 {
		case 0: // no sources
		case 1:
			m.Sources = map[int32]int64{}
		default:
			m.Sources = map[int32]int64{}
			for range 1 + rng.IntN(5) {
				m.Sources[int32(rng.IntN(300))] = pick()
			}
		}
		if i%7 == 0 {
			m.Sum = float64(rng.IntN(100)) // integral sums
		}
		v, err := enc.encode(m)
		if err != nil {
			t.Fatal(err)
		}
		want := slowDecode(t, v)
		got, ok := decodeMovie(v)
		if !ok {
			t.Fatalf("decodeMovie refused a document the store wrote: %+v", m)
		}
		if !sameMovie(got, want) {
			t.Fatalf("decodeMovie = %+v, clover = %+v (written %+v)", got, want, m)
		}
	}
}

// TestDecodeMovieRefusesWhatItDoesNotKnow: truncated documents, an extra
// field, a missing field and a document written by Clover's own encoder
// are either refused (and decoded by Clover) or decoded identically.
func TestDecodeMovieRefusesWhatItDoesNotKnow(t *testing.T) {
	m := engine.MovieStats{MovieID: 42, Partition: 2, Count: 3, Sum: 21.5, Version: 9, Sources: map[int32]int64{0: 5, 1: 7}}
	v, err := newDocEncoder().encode(m)
	if err != nil {
		t.Fatal(err)
	}
	v = append([]byte(nil), v...)
	for n := range len(v) {
		if _, ok := decodeMovie(v[:n]); ok {
			t.Errorf("decodeMovie accepted the document cut to %d of %d bytes", n, len(v))
		}
	}
	if _, ok := decodeMovie(append(append([]byte(nil), v...), 0xc0)); ok {
		t.Error("decodeMovie accepted trailing bytes")
	}

	doc := moviedoc.ToDocument(m)
	doc.Set("extra", "field")
	extra, err := d.Encode(doc)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := decodeMovie(extra); ok {
		t.Error("decodeMovie accepted a document with an unknown field")
	}
	if got, err := decodeDoc(extra); err != nil || !sameMovie(got, m) {
		t.Errorf("decodeDoc(document with an extra field) = %+v, %v; want %+v", got, err, m)
	}

	doc = moviedoc.ToDocument(m)
	byClover, err := d.Encode(doc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeDoc(byClover)
	if err != nil || !sameMovie(got, m) {
		t.Errorf("decodeDoc(written by Clover) = %+v, %v; want %+v", got, err, m)
	}
	if fast, ok := decodeMovie(byClover); ok && !sameMovie(fast, m) {
		t.Errorf("decodeMovie(written by Clover) = %+v; want %+v", fast, m)
	}
}

// BenchmarkDecode compares the fast path with Clover's decoder on one
// stored movie document.
func BenchmarkDecode(b *testing.B) {
	m := engine.MovieStats{MovieID: 4242, Partition: 1, Count: 130, Sum: 912.5, Version: 1 << 40, Sources: map[int32]int64{0: 1 << 30, 1: 1 << 31, 2: 1 << 32}}
	v, err := newDocEncoder().encode(m)
	if err != nil {
		b.Fatal(err)
	}
	v = append([]byte(nil), v...)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeMovie(v); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("clover", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			doc, err := d.Decode(v)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := moviedoc.FromDocument(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
