package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/keepstate/keepstate/avro"
)

// MovieAgg is the movie job's aggregate: the count and sum of a movie's
// ratings.
type MovieAgg struct {
	Count int64   `json:"count"`
	Sum   float64 `json:"sum"`
}

// Avg returns Sum/Count, or 0 for an empty aggregate.
func (m MovieAgg) Avg() float64 {
	if m.Count == 0 {
		return 0
	}
	return m.Sum / float64(m.Count)
}

// MovieJob is keepstate's flagship job on the Job API: Confluent-framed
// Avro ratings (decoded by serde, ratings outside 0..10 dead-lettered),
// keyed by movie id, counted and summed per movie, indexed by average, with
// each new average written to the output topic (8-byte long key, 8-byte
// double value, as Java's serializers write them). The changelog carries
// Avro CountAndSum values registered under the changelog topic's subject;
// the store keeps count and sum (see MovieTable).
func MovieJob(serde Serde) Job[int64, avro.Rating, MovieAgg] {
	return Job[int64, avro.Rating, MovieAgg]{
		Name: "movies",
		Decode: func(ctx context.Context, b []byte) (avro.Rating, error) {
			r, err := serde.DecodeRating(ctx, b)
			if err != nil {
				return r, err
			}
			if math.IsNaN(r.Rating) || math.IsInf(r.Rating, 0) || r.Rating < 0 || r.Rating > 10 {
				return r, fmt.Errorf("%w: movie %d rating %v (want 0..10)", errBadRating, r.MovieID, r.Rating)
			}
			return r, nil
		},
		Key:       func(r avro.Rating) (int64, error) { return r.MovieID, nil },
		Keys:      Int64Keys,
		Add:       func(a *MovieAgg, r avro.Rating) { a.Count++; a.Sum += r.Rating },
		Values:    movieValues{},
		Changelog: &movieChangelog{serde: serde},
		Indexes:   []Index[MovieAgg]{NumberIndex("avg", MovieAgg.Avg)},
		Output:    func(dst []byte, a MovieAgg) []byte { return appendDouble(dst, a.Avg()) },
	}
}

// movieValues stores a MovieAgg as 16 bytes: count and the sum's IEEE-754
// bits, big-endian.
type movieValues struct{}

func (movieValues) Encode(_ context.Context, _ string, a MovieAgg) ([]byte, error) {
	return appendMovieValue(make([]byte, 0, 16), a), nil
}

func (movieValues) Append(dst []byte, a MovieAgg) []byte { return appendMovieValue(dst, a) }

func appendMovieValue(b []byte, a MovieAgg) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(a.Count))
	return binary.BigEndian.AppendUint64(b, math.Float64bits(a.Sum))
}

func (movieValues) Decode(_ context.Context, _ string, b []byte) (MovieAgg, error) {
	if len(b) != 16 {
		return MovieAgg{}, fmt.Errorf("movie value must be 16 bytes, got %d: %w", len(b), ErrInvalid)
	}
	return MovieAgg{Count: int64(binary.BigEndian.Uint64(b)), Sum: math.Float64frombits(binary.BigEndian.Uint64(b[8:]))}, nil
}

// movieChangelog codes changelog values as Confluent-framed Avro
// CountAndSum through the Schema Registry.
type movieChangelog struct {
	serde Serde
	// subject caches avro.ValueSubject of the last topic.
	subject atomic.Pointer[[2]string]
}

func (c *movieChangelog) subjectOf(topic string) string {
	if s := c.subject.Load(); s != nil && s[0] == topic {
		return s[1]
	}
	s := &[2]string{topic, avro.ValueSubject(topic)}
	c.subject.Store(s)
	return s[1]
}

func (c *movieChangelog) Encode(ctx context.Context, topic string, a MovieAgg) ([]byte, error) {
	return c.serde.EncodeCountAndSum(ctx, c.subjectOf(topic), avro.CountAndSum{Count: a.Count, Sum: a.Sum})
}

func (c *movieChangelog) Decode(ctx context.Context, _ string, b []byte) (MovieAgg, error) {
	cs, err := c.serde.DecodeCountAndSum(ctx, b)
	if err != nil {
		return MovieAgg{}, err
	}
	return MovieAgg{Count: cs.Count, Sum: cs.Sum}, nil
}
