package avro

import (
	"errors"
	"math"
	"testing"
)

// Writer schemas the fuzz registry knows: ids 1 (ours), 2 (wide, all
// primitives: fast decoder) and 3 (union and array: goavro's generic
// decoder). Other ids are unknown to it.
const (
	fuzzWideSchema = `{"type":"record","name":"Rating","fields":[{"name":"user","type":"string"},
		{"name":"movie_id","type":"int"},{"name":"ok","type":"boolean"},{"name":"blob","type":"bytes"},
		{"name":"nothing","type":"null"},{"name":"rating","type":"float"},{"name":"seen","type":"long"}]}`
	fuzzComplexSchema = `{"type":"record","name":"Rating","fields":[{"name":"movie_id","type":"long"},
		{"name":"tags","type":{"type":"array","items":"string"}},
		{"name":"comment","type":["null","string"],"default":null},{"name":"rating","type":"double"}]}`
)

// FuzzDecodeRating feeds arbitrary bytes to DecodeRating against a real
// in-process registry. It checks that decoding never panics, that every
// error is a package sentinel, and that the allocation-free decoder agrees
// with goavro's generic decoder on every input.
//
//	go test -run='^$' -fuzz=FuzzDecodeRating -fuzztime=20s ./avro
func FuzzDecodeRating(f *testing.F) {
	fake := startFake(f)
	ids := []int{
		fake.seed(f, "ratings-value", RatingSchema),
		fake.seed(f, "wide-value", fuzzWideSchema),
		fake.seed(f, "complex-value", fuzzComplexSchema),
	}
	if ids[0] != 1 || ids[1] != 2 || ids[2] != 3 {
		f.Fatalf("fuzz registry ids = %v, want [1 2 3]", ids)
	}
	valid := encodeFramed(1, 362, 10)
	wide := encodeWith(f, 2, fuzzWideSchema, map[string]any{"user": "ann", "movie_id": int32(-4), "ok": true,
		"blob": []byte{9, 9}, "nothing": nil, "rating": float32(7.5), "seen": int64(1 << 40)})
	complexRec := encodeWith(f, 3, fuzzComplexSchema, map[string]any{"movie_id": int64(5), "tags": []any{"x"},
		"comment": nil, "rating": 3.0})
	for _, seed := range [][]byte{
		valid, wide, complexRec,
		encodeFramed(1, math.MinInt64, math.NaN()),
		valid[:len(valid)-1], wide[:len(wide)-2], complexRec[:7],
		append(append([]byte{}, valid...), 0), append(append([]byte{}, complexRec...), 1, 2),
		append([]byte{1}, valid[1:]...),
		Frame(99, valid[5:]), Frame(-1, valid[5:]),
		{}, {0}, {0, 0, 0, 0, 1}, []byte("garbage"),
		Frame(1, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0, 0, 0, 0, 0, 0}),
		Frame(3, []byte{2, 0xfe, 0xff, 0xff, 0xff, 0x0f}), // array with a huge block count
	} {
		f.Add(seed)
	}
	r := newTestRegistry(f, fake.URL())
	ctx := testCtx(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := r.DecodeRating(ctx, b)
		if err != nil {
			if !errors.Is(err, ErrNotFramed) && !errors.Is(err, ErrUnknownSchema) && !errors.Is(err, ErrDecode) {
				t.Fatalf("DecodeRating(% x) error %v is not ErrNotFramed, ErrUnknownSchema or ErrDecode", b, err)
			}
			if got != (Rating{}) {
				t.Fatalf("DecodeRating(% x) = %+v with error %v, want the zero Rating", b, got, err)
			}
		}
		id, payload, ferr := Unframe(b)
		if ferr != nil {
			return
		}
		w, ok := (*r.schemas.Load())[id]
		if !ok || w.fast == nil || w.err != nil {
			return
		}
		gid, gnum, gerr := (&writerSchema{id: id, codec: w.codec}).decodeGeneric(payload, ratingFields)
		switch {
		case (err == nil) != (gerr == nil):
			t.Fatalf("% x: fast decoder error %v, goavro error %v", b, err, gerr)
		case err == nil && (got.MovieID != gid || math.Float64bits(got.Rating) != math.Float64bits(gnum)):
			t.Fatalf("% x: fast decoder %+v, goavro {%d %v}", b, got, gid, gnum)
		}
	})
}
