// Package movies is keepstate's flagship job: Confluent-framed Avro ratings
// from the Schema Registry, counted and summed per movie, indexed by their
// average, with every new average written to the output topic as Kafka
// Streams' own movie-ratings example does. It is an ordinary job of the
// engine's Job API (see Job) whose state lives in the table "movies".
package movies

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"

	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
)

const (
	// Name is the job's name: its table and its HTTP routes.
	Name = "movies"
	// RepartitionSuffix and ChangelogSuffix end the topic names a deployment
	// of the movie job has always used, after the application id, as Kafka
	// Streams' movie-ratings example names them. Keeping them lets a data
	// directory or a Redis database find its changelog after an upgrade.
	RepartitionSuffix = "-ratings-by-movie-repartition"
	ChangelogSuffix   = "-movie-stats-changelog"
	// StreamKey is the Redis stream (under the store's prefix) that receives
	// every new average of the movie table when the Redis store runs it.
	StreamKey = "rating-averages-stream"
)

// ErrBadRating is wrapped by ratings outside 0..10 or not finite; such a
// record goes to the dead-letter topic with the error as its reason.
var ErrBadRating = errors.New("rating out of range")

// Agg is a movie's aggregate: the count and sum of its ratings.
type Agg struct {
	Count int64   `json:"count"`
	Sum   float64 `json:"sum"`
}

// Avg returns Sum/Count, or 0 for an empty aggregate.
func (a Agg) Avg() float64 {
	if a.Count == 0 {
		return 0
	}
	return a.Sum / float64(a.Count)
}

// Serde encodes and decodes the job's Avro records. *avro.Registry
// implements it. Implementations must be safe for concurrent use; decode
// errors wrapping engine.ErrRetry (avro.ErrRegistryUnavailable does) are
// retried, any other decode error dead-letters the record.
type Serde interface {
	DecodeRating(ctx context.Context, b []byte) (avro.Rating, error)
	EncodeCountAndSum(ctx context.Context, subject string, v avro.CountAndSum) ([]byte, error)
	DecodeCountAndSum(ctx context.Context, b []byte) (avro.CountAndSum, error)
}

// Job returns the movie job: ratings decoded by serde (outside 0..10:
// dead-lettered), keyed by movie id, counted and summed per movie, indexed
// by average (ties by movie id ascending), each new average written to the
// output topic. Keys and averages are 8 bytes big-endian, as Java's
// serializers write a long and a double. The table keeps each aggregate as
// 16 bytes (Values); the changelog, as an Avro CountAndSum.
func Job(serde Serde) engine.Job[int64, avro.Rating, Agg] {
	return engine.Job[int64, avro.Rating, Agg]{
		Name: Name,
		Decode: func(ctx context.Context, b []byte) (avro.Rating, error) {
			r, err := serde.DecodeRating(ctx, b)
			if err == nil && !(r.Rating >= 0 && r.Rating <= 10) { // NaN fails both
				err = fmt.Errorf("%w: movie %d rating %v (want 0..10)", ErrBadRating, r.MovieID, r.Rating)
			}
			return r, err
		},
		Key:           func(r avro.Rating) (int64, error) { return r.MovieID, nil },
		Keys:          engine.Int64Keys,
		Add:           func(a *Agg, r avro.Rating) { a.Count++; a.Sum += r.Rating },
		Values:        Values{},
		Changelog:     &changelog{serde: serde},
		Indexes:       []engine.Index[Agg]{engine.NumberIndex("avg", Agg.Avg)},
		TiesAscending: true,
		Output:        func(dst []byte, a Agg) []byte { return binary.BigEndian.AppendUint64(dst, math.Float64bits(a.Avg())) },
	}
}

// Spec is the table spec of the movie job: one number index, avg, whose
// descending order ties by movie id ascending.
var Spec = engine.TableSpec{Name: Name, Indexes: []engine.IndexSpec{{Name: "avg", Kind: engine.IndexNumber}}, TiesAscending: true}

// Key returns the record and table key of movie id.
func Key(id int64) []byte { return engine.Int64Keys.Append(make([]byte, 0, 8), id) }

// StreamFields returns the fields of a movie's stream entry: "movieId",
// "avg" and "count", as decimal strings (the average in the shortest form
// that parses back to the same float64). A document that is not a movie's
// gives no fields. It neither keeps nor modifies d.
func StreamFields(d engine.Doc) []any {
	id, kerr := engine.Int64Keys.Decode(d.Key)
	a, verr := Values{}.Decode(context.Background(), "", d.Value)
	if kerr != nil || verr != nil {
		return nil
	}
	return []any{"movieId", strconv.FormatInt(id, 10), "avg", strconv.FormatFloat(a.Avg(), 'g', -1, 64), "count", strconv.FormatInt(a.Count, 10)}
}

// Values is the table codec of Agg: 16 bytes, the count and the sum's
// IEEE-754 bits, big-endian. It is stateless and safe for concurrent use.
type Values struct{}

// Encode returns the 16 bytes of a.
func (Values) Encode(_ context.Context, _ string, a Agg) ([]byte, error) {
	return Values{}.Append(make([]byte, 0, 16), a), nil
}

// Append appends the 16 bytes of a to dst.
func (Values) Append(dst []byte, a Agg) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.Count))
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(a.Sum))
}

// Decode reads 16 bytes written by Encode; any other length wraps
// engine.ErrInvalid.
func (Values) Decode(_ context.Context, _ string, b []byte) (Agg, error) {
	if len(b) != 16 {
		return Agg{}, fmt.Errorf("movie value must be 16 bytes, got %d: %w", len(b), engine.ErrInvalid)
	}
	return Agg{Count: int64(binary.BigEndian.Uint64(b)), Sum: math.Float64frombits(binary.BigEndian.Uint64(b[8:]))}, nil
}

// changelog codes changelog values as Confluent-framed Avro CountAndSum
// through the Schema Registry.
type changelog struct {
	serde   Serde
	subject atomic.Pointer[[2]string] // the last topic and its avro.ValueSubject
}

func (c *changelog) Encode(ctx context.Context, topic string, a Agg) ([]byte, error) {
	s := c.subject.Load()
	if s == nil || s[0] != topic {
		s = &[2]string{topic, avro.ValueSubject(topic)}
		c.subject.Store(s)
	}
	return c.serde.EncodeCountAndSum(ctx, s[1], avro.CountAndSum(a))
}

func (c *changelog) Decode(ctx context.Context, _ string, b []byte) (Agg, error) {
	cs, err := c.serde.DecodeCountAndSum(ctx, b)
	return Agg(cs), err
}
