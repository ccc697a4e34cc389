package avro

import (
	"errors"
	"math"
	"testing"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// encodeWith returns native encoded with schema and framed with id.
func encodeWith(t testing.TB, id int, schema string, native map[string]any) []byte {
	t.Helper()
	c, err := goavro.NewCodec(schema)
	if err != nil {
		t.Fatalf("codec for %s: %v", schema, err)
	}
	b, err := c.BinaryFromNative(nil, native)
	if err != nil {
		t.Fatalf("encode %v: %v", native, err)
	}
	return Frame(id, b)
}

func TestDecodeRatingBadInput(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	r := newTestRegistry(t, fake.URL())
	valid, err := r.EncodeRating(ctx, "ratings-value", Rating{MovieID: 362, Rating: 10})
	if err != nil {
		t.Fatalf("EncodeRating: %v", err)
	}
	wrongMagic := append([]byte{1}, valid[1:]...)
	unknownID := Frame(4242, valid[5:])
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"nil", nil, ErrNotFramed},
		{"empty", []byte{}, ErrNotFramed},
		{"header only 4 bytes", valid[:4], ErrNotFramed},
		{"garbage text", []byte("this is not avro at all"), ErrNotFramed},
		{"garbage 0xff", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ErrNotFramed},
		{"wrong magic byte", wrongMagic, ErrNotFramed},
		{"unknown schema id", unknownID, ErrUnknownSchema},
		{"negative schema id", Frame(-5, valid[5:]), ErrUnknownSchema},
		{"empty payload", valid[:5], ErrDecode},
		{"truncated in varint", valid[:6], ErrDecode},
		{"truncated in double", valid[:len(valid)-1], ErrDecode},
		{"unterminated varint", Frame(1, []byte{0xff, 0xff, 0xff}), ErrDecode},
		{"trailing garbage", append(append([]byte{}, valid...), 0), ErrDecode},
		{"trailing record", append(append([]byte{}, valid...), valid[5:]...), ErrDecode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.DecodeRating(ctx, tt.in)
			if !errors.Is(err, tt.want) {
				t.Errorf("DecodeRating(% x) = %+v, %v; want %v", tt.in, got, err, tt.want)
			}
			if err != nil && got != (Rating{}) {
				t.Errorf("DecodeRating(% x) returned %+v with an error, want the zero Rating", tt.in, got)
			}
		})
	}
}

// TestDecodeWriterSchemas decodes records written with schemas other than
// ours, as a Java producer with an evolved schema would write them.
func TestDecodeWriterSchemas(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	tests := []struct {
		name    string
		schema  string
		native  map[string]any
		want    Rating
		wantErr error
		fast    bool // decoded without goavro's generic maps
	}{
		{
			name:   "int movie id and float rating",
			schema: `{"type":"record","name":"Rating","fields":[{"name":"movie_id","type":"int"},{"name":"rating","type":"float"}]}`,
			native: map[string]any{"movie_id": int32(-7), "rating": float32(2.5)},
			want:   Rating{MovieID: -7, Rating: 2.5},
			fast:   true,
		},
		{
			name:   "long rating, fields reordered",
			schema: `{"type":"record","name":"Rating","fields":[{"name":"rating","type":"long"},{"name":"movie_id","type":"long"}]}`,
			native: map[string]any{"movie_id": int64(1 << 50), "rating": int64(8)},
			want:   Rating{MovieID: 1 << 50, Rating: 8},
			fast:   true,
		},
		{
			name: "extra primitive fields skipped",
			schema: `{"type":"record","name":"Rating","namespace":"io.confluent.demo","fields":[
				{"name":"user","type":"string"},{"name":"movie_id","type":"long"},{"name":"ok","type":"boolean"},
				{"name":"blob","type":"bytes"},{"name":"nothing","type":"null"},{"name":"rating","type":"double"},
				{"name":"weight","type":"float"},{"name":"n","type":"int"}]}`,
			native: map[string]any{"user": "ann", "movie_id": int64(362), "ok": true, "blob": []byte{1, 2, 3},
				"nothing": nil, "rating": 9.5, "weight": float32(1), "n": int32(-3)},
			want: Rating{MovieID: 362, Rating: 9.5},
			fast: true,
		},
		{
			name: "complex extra fields (generic decoder)",
			schema: `{"type":"record","name":"Rating","fields":[{"name":"movie_id","type":"long"},
				{"name":"tags","type":{"type":"array","items":"string"}},
				{"name":"comment","type":["null","string"],"default":null},{"name":"rating","type":"double"}]}`,
			native: map[string]any{"movie_id": int64(5), "tags": []any{"a", "b"},
				"comment": goavro.Union("string", "great"), "rating": 7.25},
			want: Rating{MovieID: 5, Rating: 7.25},
		},
		{
			name:    "rating missing",
			schema:  `{"type":"record","name":"Rating","fields":[{"name":"movie_id","type":"long"}]}`,
			native:  map[string]any{"movie_id": int64(5)},
			wantErr: ErrDecode,
			fast:    true,
		},
		{
			name:    "movie id missing",
			schema:  `{"type":"record","name":"Other","fields":[{"name":"id","type":"long"},{"name":"rating","type":"double"}]}`,
			native:  map[string]any{"id": int64(5), "rating": 1.0},
			wantErr: ErrDecode,
			fast:    true,
		},
		{
			name:    "movie id is a string",
			schema:  `{"type":"record","name":"Rating","fields":[{"name":"movie_id","type":"string"},{"name":"rating","type":"double"}]}`,
			native:  map[string]any{"movie_id": "362", "rating": 1.0},
			wantErr: ErrDecode,
			fast:    true,
		},
		{
			name:    "rating is a union (generic decoder)",
			schema:  `{"type":"record","name":"Rating","fields":[{"name":"movie_id","type":"long"},{"name":"rating","type":["null","double"]}]}`,
			native:  map[string]any{"movie_id": int64(5), "rating": goavro.Union("double", 1.0)},
			wantErr: ErrDecode,
		},
		{
			name:    "not a record",
			schema:  `"long"`,
			wantErr: ErrDecode,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fake.seed(t, "writer-"+string(rune('a'+i))+"-value", tt.schema)
			var b []byte
			if tt.native != nil {
				b = encodeWith(t, id, tt.schema, tt.native)
			} else {
				b = Frame(id, []byte{2})
			}
			reg := newTestRegistry(t, fake.URL())
			got, err := reg.DecodeRating(ctx, b)
			if w, ok := (*reg.schemas.Load())[id]; ok && (w.fast != nil) != tt.fast {
				t.Errorf("fast decoder used = %v, want %v", w.fast != nil, tt.fast)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("DecodeRating = %+v, %v; want %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("DecodeRating = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestDecodeUnusableWriterSchema(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	tests := []struct {
		name   string
		schema sr.Schema
	}{
		{"json schema", sr.Schema{Schema: `{"type":"object"}`, Type: sr.TypeJSON}},
		{"avro that does not compile", sr.Schema{Schema: `{"type":"record","name":"R","fields":[{"name":"x","type":"nope"}]}`, Type: sr.TypeAvro}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := 900 + i
			fake.SeedSchema("bad-"+tt.name, 1, id, tt.schema)
			_, err := newTestRegistry(t, fake.URL()).DecodeRating(ctx, Frame(id, []byte{2, 0, 0, 0, 0, 0, 0, 0, 0}))
			if !errors.Is(err, ErrDecode) {
				t.Errorf("DecodeRating with %s = %v, want ErrDecode", tt.name, err)
			}
		})
	}
}

func TestDecodeCountAndSumFromRatingIsDecodeError(t *testing.T) {
	fake := startFake(t)
	ctx := testCtx(t)
	r := newTestRegistry(t, fake.URL())
	b, err := r.EncodeRating(ctx, "ratings-value", Rating{MovieID: 1, Rating: math.Pi})
	if err != nil {
		t.Fatalf("EncodeRating: %v", err)
	}
	if _, err := r.DecodeCountAndSum(ctx, b); !errors.Is(err, ErrDecode) {
		t.Errorf("DecodeCountAndSum(a Rating) = %v, want ErrDecode (no count/sum fields)", err)
	}
}
