package avro

import (
	"testing"
)

// BenchmarkDecodeRating measures the engine's hot path: a cached writer
// schema, our own Rating schema (allocation-free decoder).
func BenchmarkDecodeRating(b *testing.B) {
	fake, r, rec := cachedRating(b)
	ctx := testCtx(b)
	before := fake.requests.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.DecodeRating(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n := fake.requests.Load() - before; n != 0 {
		b.Fatalf("cached decodes sent %d requests, want 0", n)
	}
}

// BenchmarkDecodeRatingParallel is BenchmarkDecodeRating from all cores.
func BenchmarkDecodeRatingParallel(b *testing.B) {
	_, r, rec := cachedRating(b)
	ctx := testCtx(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := r.DecodeRating(ctx, rec); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkDecodeRatingGeneric measures a writer schema the fast decoder
// does not handle (a union and an array), decoded through goavro.
func BenchmarkDecodeRatingGeneric(b *testing.B) {
	fake := startFake(b)
	ctx := testCtx(b)
	id := fake.seed(b, "complex-value", fuzzComplexSchema)
	rec := encodeWith(b, id, fuzzComplexSchema, map[string]any{"movie_id": int64(362), "tags": []any{},
		"comment": nil, "rating": 10.0})
	r := newTestRegistry(b, fake.URL())
	if _, err := r.DecodeRating(ctx, rec); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.DecodeRating(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeRating measures encoding with a cached schema id.
func BenchmarkEncodeRating(b *testing.B) {
	fake := startFake(b)
	ctx := testCtx(b)
	r := newTestRegistry(b, fake.URL())
	if _, err := r.EncodeRating(ctx, "ratings-value", Rating{}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.EncodeRating(ctx, "ratings-value", Rating{MovieID: int64(i), Rating: 7}); err != nil {
			b.Fatal(err)
		}
	}
}

// cachedRating returns a registry client whose cache already holds the
// schema of rec, an encoded rating, and the fake registry behind it.
func cachedRating(b *testing.B) (*fakeRegistry, *Registry, []byte) {
	b.Helper()
	fake := startFake(b)
	ctx := testCtx(b)
	r := newTestRegistry(b, fake.URL())
	rec, err := r.EncodeRating(ctx, "ratings-value", Rating{MovieID: 362, Rating: 10})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.DecodeRating(ctx, rec); err != nil {
		b.Fatal(err)
	}
	return fake, r, rec
}
