package avro

import (
	"context"
	"fmt"
)

// DecodeNative decodes a Confluent-framed Avro record of any schema with
// the writer schema its id names, into goavro's native form (a record is a
// map[string]any; see github.com/linkedin/goavro/v2). Trailing bytes after
// the record are an error. The writer schema is fetched once per id.
// Errors wrap ErrNotFramed, ErrDecode, ErrUnknownSchema (the record is bad),
// ErrRegistryUnavailable (retry), or ctx's error. It never panics. Safe for
// concurrent use.
func (r *Registry) DecodeNative(ctx context.Context, b []byte) (any, error) {
	w, payload, err := r.writerOf(ctx, b)
	if err != nil {
		return nil, err
	}
	return w.native(payload)
}

// Decoder returns a decoder of Confluent-framed Avro records for a job's
// input (engine.Job.Decode): each record is decoded with its writer
// schema (DecodeNative), then convert turns the record's fields into a V.
// A registry outage is retried by the engine (ErrRegistryUnavailable); a
// record that is not an Avro record, fails to decode, or that convert
// refuses is dead-lettered with the reason. Safe for concurrent use when
// convert is.
func Decoder[V any](r *Registry, convert func(fields map[string]any) (V, error)) func(ctx context.Context, b []byte) (V, error) {
	return func(ctx context.Context, b []byte) (V, error) {
		var zero V
		native, err := r.DecodeNative(ctx, b)
		if err != nil {
			return zero, err
		}
		fields, ok := native.(map[string]any)
		if !ok {
			return zero, fmt.Errorf("%w: %T is not an Avro record", ErrDecode, native)
		}
		v, err := convert(fields)
		if err != nil {
			return zero, fmt.Errorf("%w: %w", ErrDecode, err)
		}
		return v, nil
	}
}
