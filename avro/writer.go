package avro

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/linkedin/goavro/v2"
	"github.com/riferrei/srclient"
)

func init() {
	// goavro allocates the items a record announces before reading them.
	goavro.MaxBlockCount = min(goavro.MaxBlockCount, 1<<20)
}

// pairFields names the two fields read from a record: an integer one and a
// numeric one (Rating: movie_id, rating; CountAndSum: count, sum).
type pairFields struct {
	what, id, num string // what names the record in messages
	schema        string // ours, registered to encode
	plan          int    // index of its plan in writerSchema.plans
}

var (
	ratingFields      = &pairFields{"rating", "movie_id", "rating", RatingSchema, 0}
	countAndSumFields = &pairFields{"count and sum", "count", "sum", CountAndSumSchema, 1}
)

// pairPlan locates a pairFields in a writer schema's fields.
type pairPlan struct {
	idIdx, numIdx int
	err           error // the writer schema cannot give these fields
}

// writerSchema is a cached schema id: its codec and decoding plans, or the
// permanent reason it cannot be used. Immutable once published.
type writerSchema struct {
	id    int
	codec *goavro.Codec
	fast  fastRecord  // nil: decode with goavro's generic codec
	plans [2]pairPlan // of ratingFields and countAndSumFields
	err   error       // wraps ErrDecode: the schema is unusable
}

// newWriterSchema compiles the schema s the registry holds for id. A
// schemaType that is absent or empty means Avro.
func newWriterSchema(id int, s *srclient.Schema) *writerSchema {
	w := &writerSchema{id: id}
	if t := s.SchemaType(); t != nil && *t != "" && *t != srclient.Avro {
		w.err = fmt.Errorf("%w: schema id %d is a %s schema, not Avro", ErrDecode, id, *t)
		return w
	}
	var err error
	if w.codec, err = goavro.NewCodec(s.Schema()); err != nil {
		w.err = fmt.Errorf("%w: schema id %d does not compile: %v", ErrDecode, id, err)
		return w
	}
	var rec struct {
		Type   any
		Fields []struct {
			Name string
			Type any
		}
	}
	if json.Unmarshal([]byte(s.Schema()), &rec) != nil || rec.Type != "record" {
		return w // not a plain record: goavro decodes it and the fields are checked at run time
	}
	names := make([]string, len(rec.Fields)) // unique: goavro checked
	kinds := make([]kind, len(rec.Fields))
	for i, f := range rec.Fields {
		prim, _ := f.Type.(string) // a complex or named type is kind 0
		names[i], kinds[i] = f.Name, kind(max(slices.Index(kindNames[:], prim), 0))
	}
	if !slices.Contains(kinds, 0) {
		w.fast = kinds // non-nil even for a record of no fields
	}
	for _, p := range []*pairFields{ratingFields, countAndSumFields} {
		w.plans[p.plan] = w.plan(names, kinds, p)
	}
	return w
}

// plan finds the fields of p; with a fast decoder it also checks their types.
func (w *writerSchema) plan(names []string, kinds []kind, p *pairFields) pairPlan {
	pp := pairPlan{idIdx: slices.Index(names, p.id), numIdx: slices.Index(names, p.num)}
	switch {
	case pp.idIdx < 0:
		pp.err = fmt.Errorf("%w: schema id %d has no field %q", ErrDecode, w.id, p.id)
	case pp.numIdx < 0:
		pp.err = fmt.Errorf("%w: schema id %d has no field %q", ErrDecode, w.id, p.num)
	case w.fast == nil:
	case kinds[pp.idIdx] != kindInt && kinds[pp.idIdx] != kindLong:
		pp.err = fmt.Errorf("%w: schema id %d: field %q is not a long or int", ErrDecode, w.id, p.id)
	case kinds[pp.numIdx] < kindInt || kinds[pp.numIdx] > kindDouble:
		pp.err = fmt.Errorf("%w: schema id %d: field %q is not a double, float, long or int", ErrDecode, w.id, p.num)
	}
	return pp
}

// decodePair decodes payload with the writer schema, which must be usable,
// and returns fields p. Every error wraps ErrDecode. It never panics.
func (w *writerSchema) decodePair(payload []byte, p *pairFields) (int64, float64, error) {
	switch pp := &w.plans[p.plan]; {
	case pp.err != nil:
		return 0, 0, pp.err
	case w.fast != nil:
		id, num, err := w.fast.decodePair(payload, pp.idIdx, pp.numIdx)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: schema id %d: %v", ErrDecode, w.id, err)
		}
		return id, num, nil
	}
	return w.decodeGeneric(payload, p)
}

// decodeGeneric is the slow path through goavro's native maps.
func (w *writerSchema) decodeGeneric(payload []byte, p *pairFields) (id int64, num float64, err error) {
	native, err := w.native(payload)
	if err != nil {
		return 0, 0, err
	}
	m, ok := native.(map[string]any)
	if !ok {
		return 0, 0, fmt.Errorf("%w: schema id %d is not a record", ErrDecode, w.id)
	}
	switch v := m[p.id].(type) {
	case int64:
		id = v
	case int32:
		id = int64(v)
	default:
		return 0, 0, fmt.Errorf("%w: schema id %d: field %q is missing or not a long or int (%T)", ErrDecode, w.id, p.id, v)
	}
	switch v := m[p.num].(type) {
	case float64:
		num = v
	case float32:
		num = float64(v)
	case int64:
		num = float64(v)
	case int32:
		num = float64(v)
	default:
		return 0, 0, fmt.Errorf("%w: schema id %d: field %q is missing or not a double, float, long or int (%T)", ErrDecode, w.id, p.num, v)
	}
	return id, num, nil
}

// native decodes payload into goavro's native form with the writer schema,
// which must be usable; bytes after the record are an error. Every error
// wraps ErrDecode. It never panics.
func (w *writerSchema) native(payload []byte) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("%w: schema id %d: decoder panic: %v", ErrDecode, w.id, r)
		}
	}()
	v, rest, err := w.codec.NativeFromBinary(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: schema id %d: %v", ErrDecode, w.id, err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: schema id %d: %d trailing bytes after the record", ErrDecode, w.id, len(rest))
	}
	return v, nil
}
