package avro

import (
	"bytes"
	"math"
	"testing"

	"github.com/linkedin/goavro/v2"
)

func TestRatingRoundTrip(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	enc := newTestRegistry(t, fake.URL())
	tests := []Rating{
		{MovieID: 362, Rating: 10},
		{MovieID: 0, Rating: 0},
		{MovieID: -1, Rating: -0.5},
		{MovieID: math.MaxInt64, Rating: math.MaxFloat64},
		{MovieID: math.MinInt64, Rating: math.SmallestNonzeroFloat64},
		{MovieID: 1 << 40, Rating: math.Inf(-1)},
		{MovieID: 7, Rating: math.NaN()},
	}
	for _, want := range tests {
		b, err := enc.EncodeRating(ctx, ValueSubject("ratings"), want)
		if err != nil {
			t.Fatalf("EncodeRating(%+v): %v", want, err)
		}
		// A second client has no cache: it must fetch the writer schema.
		dec := newTestRegistry(t, fake.URL())
		for _, r := range []*Registry{enc, dec} {
			got, err := r.DecodeRating(ctx, b)
			if err != nil {
				t.Fatalf("DecodeRating(%x): %v", b, err)
			}
			if got.MovieID != want.MovieID || math.Float64bits(got.Rating) != math.Float64bits(want.Rating) {
				t.Errorf("DecodeRating(EncodeRating(%+v)) = %+v", want, got)
			}
		}
	}
}

func TestCountAndSumRoundTrip(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	enc := newTestRegistry(t, fake.URL())
	dec := newTestRegistry(t, fake.URL())
	for _, want := range []CountAndSum{{1, 9}, {2, 17.5}, {math.MaxInt64, -1e300}, {0, 0}} {
		b, err := enc.EncodeCountAndSum(ctx, ValueSubject("app-movie-stats-changelog"), want)
		if err != nil {
			t.Fatalf("EncodeCountAndSum(%+v): %v", want, err)
		}
		got, err := dec.DecodeCountAndSum(ctx, b)
		if err != nil || got != want {
			t.Errorf("DecodeCountAndSum(EncodeCountAndSum(%+v)) = %+v, %v", want, got, err)
		}
	}
}

// TestRatingConfluentBytes pins the wire format the Confluent serializer
// produces for {movie_id: 362, rating: 10.0} as the first schema of a fresh
// registry (id 1): magic 0, id 00000001 big-endian, 362 as zigzag varint
// (724 = 0b101_1010100 -> d4 05), 10.0 as little-endian IEEE 754
// (0x4024000000000000 -> 00 00 00 00 00 00 24 40).
func TestRatingConfluentBytes(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	r := newTestRegistry(t, fake.URL())
	got, err := r.EncodeRating(ctx, "ratings-value", Rating{MovieID: 362, Rating: 10.0})
	if err != nil {
		t.Fatalf("EncodeRating: %v", err)
	}
	want := []byte{0x00, 0x00, 0x00, 0x00, 0x01, 0xd4, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x24, 0x40}
	if !bytes.Equal(got, want) {
		t.Errorf("EncodeRating({362, 10}) = % x, want % x", got, want)
	}
	// An independent Avro implementation reads the payload the same way.
	codec, err := goavro.NewCodec(RatingSchema)
	if err != nil {
		t.Fatalf("goavro codec: %v", err)
	}
	native, rest, err := codec.NativeFromBinary(got[5:])
	if err != nil || len(rest) != 0 {
		t.Fatalf("goavro decode: %v, %d bytes left", err, len(rest))
	}
	m := native.(map[string]any)
	if m["movie_id"] != int64(362) || m["rating"] != 10.0 {
		t.Errorf("goavro read %v, want movie_id 362 rating 10", m)
	}
	// And goavro's encoding of the same record is byte-identical.
	enc, err := codec.BinaryFromNative(nil, map[string]any{"movie_id": int64(362), "rating": 10.0})
	if err != nil || !bytes.Equal(enc, got[5:]) {
		t.Errorf("goavro encodes % x (%v), we encode % x", enc, err, got[5:])
	}
}

func TestEmbeddedSchemas(t *testing.T) {
	tests := []struct {
		schema, wantName string
	}{
		{RatingSchema, "io.confluent.demo.Rating"},
		{CountAndSumSchema, "io.confluent.demo.CountAndSum"},
	}
	for _, tt := range tests {
		t.Run(tt.wantName, func(t *testing.T) {
			c, err := goavro.NewCodec(tt.schema)
			if err != nil {
				t.Fatalf("schema does not compile: %v", err)
			}
			if !bytes.Contains([]byte(c.CanonicalSchema()), []byte(`"name":"`+tt.wantName+`"`)) {
				t.Errorf("canonical schema %s, want record %s", c.CanonicalSchema(), tt.wantName)
			}
		})
	}
}
