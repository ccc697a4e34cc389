package avro

import (
	"context"
	"fmt"
)

// EncodeRating returns r in the Confluent wire format under the schema id of
// RatingSchema in subject (registered on first use, then cached; use
// ValueSubject(topic)). Errors are those of Register.
func (r *Registry) EncodeRating(ctx context.Context, subject string, v Rating) ([]byte, error) {
	id, err := r.Register(ctx, subject, RatingSchema)
	if err != nil {
		return nil, fmt.Errorf("encode rating: %w", err)
	}
	return encodeFramed(id, v.MovieID, v.Rating), nil
}

// EncodeCountAndSum returns v in the Confluent wire format under the schema
// id of CountAndSumSchema in subject (registered on first use, then cached).
// Errors are those of Register.
func (r *Registry) EncodeCountAndSum(ctx context.Context, subject string, v CountAndSum) ([]byte, error) {
	id, err := r.Register(ctx, subject, CountAndSumSchema)
	if err != nil {
		return nil, fmt.Errorf("encode count and sum: %w", err)
	}
	return encodeFramed(id, v.Count, v.Sum), nil
}

// DecodeRating decodes a Confluent-framed rating with the writer schema its
// id names: field movie_id (long or int) and field rating (double, float,
// long or int); other fields are skipped. The writer schema is fetched once
// per id; later calls touch no network, take no lock and allocate nothing.
// ctx only matters when the registry must be asked. Errors wrap
// ErrNotFramed, ErrDecode, ErrUnknownSchema (all permanent for the record),
// ErrRegistryUnavailable (retry), or ctx's error. It never panics.
func (r *Registry) DecodeRating(ctx context.Context, b []byte) (Rating, error) {
	id, num, err := r.decodePair(ctx, b, ratingFields, func(w *writerSchema) *pairPlan { return &w.rating })
	if err != nil {
		return Rating{}, fmt.Errorf("decode rating: %w", err)
	}
	return Rating{MovieID: id, Rating: num}, nil
}

// DecodeCountAndSum decodes a Confluent-framed CountAndSum with the writer
// schema its id names: field count (long or int) and field sum (double,
// float, long or int). Caching, errors and concurrency are as DecodeRating.
func (r *Registry) DecodeCountAndSum(ctx context.Context, b []byte) (CountAndSum, error) {
	n, sum, err := r.decodePair(ctx, b, countAndSumFields, func(w *writerSchema) *pairPlan { return &w.countAndSum })
	if err != nil {
		return CountAndSum{}, fmt.Errorf("decode count and sum: %w", err)
	}
	return CountAndSum{Count: n, Sum: sum}, nil
}

func (r *Registry) decodePair(ctx context.Context, b []byte, p pairFields, plan func(*writerSchema) *pairPlan) (int64, float64, error) {
	w, payload, err := r.writerOf(ctx, b)
	if err != nil {
		return 0, 0, err
	}
	return w.decodePair(payload, plan(w), p)
}
