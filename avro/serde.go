package avro

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
)

var (
	//go:embed rating.avsc
	ratingSchemaFile string
	//go:embed countandsum.avsc
	countAndSumSchemaFile string

	// RatingSchema is the JSON text of io.confluent.demo.Rating
	// {movie_id: long, rating: double}, the value of the ratings topic.
	RatingSchema = strings.TrimSpace(ratingSchemaFile)
	// CountAndSumSchema is the JSON text of io.confluent.demo.CountAndSum
	// {count: long, sum: double}, the value of the changelog topic.
	CountAndSumSchema = strings.TrimSpace(countAndSumSchemaFile)
)

// Rating is one rating of a movie (io.confluent.demo.Rating).
type Rating struct {
	MovieID int64   // Avro field movie_id
	Rating  float64 // Avro field rating: 0 to 10 by convention, which the codec does not check
}

// CountAndSum is the aggregate of a movie's ratings (io.confluent.demo.CountAndSum).
type CountAndSum struct {
	Count int64   // the number of ratings (Avro field count)
	Sum   float64 // the sum of the ratings (Avro field sum)
}

// ValueSubject returns the registry subject of the values of topic under the
// Confluent TopicNameStrategy: "<topic>-value".
func ValueSubject(topic string) string { return topic + "-value" }

// EncodeRating returns v in the Confluent wire format under the schema id of
// RatingSchema in subject (registered on first use, then cached; use
// ValueSubject(topic)). Errors are those of Register.
func (r *Registry) EncodeRating(ctx context.Context, subject string, v Rating) ([]byte, error) {
	return r.encodePair(ctx, subject, ratingFields, v.MovieID, v.Rating)
}

// EncodeCountAndSum is EncodeRating for a CountAndSum, under CountAndSumSchema.
func (r *Registry) EncodeCountAndSum(ctx context.Context, subject string, v CountAndSum) ([]byte, error) {
	return r.encodePair(ctx, subject, countAndSumFields, v.Count, v.Sum)
}

func (r *Registry) encodePair(ctx context.Context, subject string, p *pairFields,
	l int64, d float64) ([]byte, error) {
	id, err := r.Register(ctx, subject, p.schema)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", p.what, err)
	}
	return encodeFramed(id, l, d), nil
}

// DecodeRating decodes a Confluent-framed rating with the writer schema its
// id names: field movie_id (long or int) and field rating (double, float,
// long or int); other fields are skipped. After the first record of an id
// it touches no network, takes no lock and allocates nothing. Errors wrap
// ErrNotFramed, ErrDecode, ErrUnknownSchema (all permanent for the record),
// ErrRegistryUnavailable (retry), or ctx's error. It never panics.
func (r *Registry) DecodeRating(ctx context.Context, b []byte) (Rating, error) {
	id, num, err := r.decodePair(ctx, b, ratingFields)
	return Rating{MovieID: id, Rating: num}, err
}

// DecodeCountAndSum is DecodeRating for a CountAndSum: field count (long or
// int) and field sum (double, float, long or int).
func (r *Registry) DecodeCountAndSum(ctx context.Context, b []byte) (CountAndSum, error) {
	n, sum, err := r.decodePair(ctx, b, countAndSumFields)
	return CountAndSum{Count: n, Sum: sum}, err
}

// decodePair returns fields p of the record b, or zeros and an error.
func (r *Registry) decodePair(ctx context.Context, b []byte, p *pairFields) (id int64, num float64, err error) {
	w, payload, err := r.writerOf(ctx, b)
	if err == nil {
		id, num, err = w.decodePair(payload, p)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("decode %s: %w", p.what, err)
	}
	return id, num, nil
}

// DecodeNative decodes a Confluent-framed Avro record of any schema with
// the writer schema its id names, into goavro's native form (a record is a
// map[string]any; see github.com/linkedin/goavro/v2). Trailing bytes after
// the record are an error. Caching and errors are as DecodeRating.
func (r *Registry) DecodeNative(ctx context.Context, b []byte) (any, error) {
	w, payload, err := r.writerOf(ctx, b)
	if err != nil {
		return nil, err
	}
	return w.native(payload)
}

// Decoder returns a decoder of Confluent-framed Avro records for a job's
// input (engine.Job.Decode): DecodeNative, then convert turns the record's
// fields into a V. A registry outage is retried by the engine; a record
// that is not an Avro record, fails to decode, or that convert refuses
// (ErrDecode) is dead-lettered with the reason. Safe for concurrent use
// when convert is.
func Decoder[V any](r *Registry, convert func(fields map[string]any) (V, error)) func(ctx context.Context, b []byte) (V, error) {
	return func(ctx context.Context, b []byte) (V, error) {
		var zero V
		native, err := r.DecodeNative(ctx, b)
		fields, ok := native.(map[string]any)
		switch {
		case err != nil:
			return zero, err
		case !ok:
			return zero, fmt.Errorf("%w: %T is not an Avro record", ErrDecode, native)
		}
		v, err := convert(fields)
		if err != nil {
			return zero, fmt.Errorf("%w: %w", ErrDecode, err)
		}
		return v, nil
	}
}
