package bench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
)

// Workload distributions of the end-to-end benchmark.
const (
	DistZipf    = "zipf"    // Zipf-skewed popularity (a few blockbusters, a long tail), as `keepstate produce`
	DistUniform = "uniform" // every movie equally often
	DistFill    = "fill"    // movies 1..Movies once each, in order
)

// Workload is a reproducible sequence of ratings: Ratings ratings over movie
// ids 1..Movies drawn with Dist, from Seed. Two workloads with the same
// fields give the same sequence.
type Workload struct {
	Dist    string // DistZipf, DistUniform or DistFill
	Movies  int64
	Ratings int64 // ignored by DistFill (one rating per movie)
	Seed    uint64
}

// Validate checks the workload.
func (w Workload) Validate() error {
	switch w.Dist {
	case DistZipf, DistUniform, DistFill:
	default:
		return fmt.Errorf("%w: unknown workload distribution %q (want %s, %s or %s)", app.ErrConfig, w.Dist, DistZipf, DistUniform, DistFill)
	}
	if w.Movies <= 1 || (w.Dist != DistFill && w.Ratings <= 0) {
		return fmt.Errorf("%w: a workload needs more than one movie and at least one rating", app.ErrConfig)
	}
	return nil
}

// Len is how many ratings the workload has.
func (w Workload) Len() int64 {
	if w.Dist == DistFill {
		return w.Movies
	}
	return w.Ratings
}

// Generator returns the workload's generator: each call gives the next rating
// and false once all Len() were given. Ratings are multiples of 0.5, so any
// sum of them is exact in a float64 whatever the order. Not safe for
// concurrent use.
func (w Workload) Generator() func() (avro.Rating, bool) {
	rnd := rand.New(rand.NewPCG(w.Seed, w.Seed^0xa0761d6478bd642f))
	var zipf *rand.Zipf
	if w.Dist == DistZipf {
		zipf = rand.NewZipf(rnd, 1.07, 2, uint64(w.Movies-1))
	}
	var n int64
	return func() (avro.Rating, bool) {
		if n >= w.Len() {
			return avro.Rating{}, false
		}
		n++
		var id int64
		switch w.Dist {
		case DistZipf:
			id = int64(zipf.Uint64()) + 1
		case DistUniform:
			id = rnd.Int64N(w.Movies) + 1
		default:
			id = n
		}
		quality := float64((uint64(id)*2654435761)%11) * 0.8
		v := math.Round((quality+rnd.NormFloat64()*1.5+1)*2) / 2
		return avro.Rating{MovieID: id, Rating: math.Max(0, math.Min(10, v))}, true
	}
}

// Truth is the exact count and sum of every movie's ratings, accumulated
// while they are produced. Safe for concurrent use.
type Truth struct {
	mu     sync.Mutex
	movies map[int64]MovieTruth
	total  int64
}

// MovieTruth is one movie's exact count and sum.
type MovieTruth struct {
	Count int64
	Sum   float64
}

// Avg is the average as every system computes it: sum / count.
func (m MovieTruth) Avg() float64 { return m.Sum / float64(m.Count) }

// NewTruth returns an empty Truth.
func NewTruth() *Truth { return &Truth{movies: map[int64]MovieTruth{}} }

// Add counts one rating.
func (t *Truth) Add(r avro.Rating) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.movies[r.MovieID]
	m.Count++
	m.Sum += r.Rating
	t.movies[r.MovieID] = m
	t.total++
}

// Get returns movie id's truth, and false when it was never rated.
func (t *Truth) Get(id int64) (MovieTruth, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.movies[id]
	return m, ok
}

// IDs returns the rated movies' ids, sorted.
func (t *Truth) IDs() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.movies))
}

// Movies is how many distinct movies were rated.
func (t *Truth) Movies() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.movies)
}

// MostRated returns the movie with the most ratings (the lowest id on a tie).
func (t *Truth) MostRated() (int64, MovieTruth) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var best int64
	var bm MovieTruth
	for id, m := range t.movies {
		if m.Count > bm.Count || (m.Count == bm.Count && id < best) {
			best, bm = id, m
		}
	}
	return best, bm
}

// ProduceOptions says where and how ProduceWorkload sends ratings.
type ProduceOptions struct {
	Brokers    []string
	Topic      string
	Partitions int32                                              // if the topic must be created
	Encode     func(context.Context, avro.Rating) ([]byte, error) // frames a rating as the topic expects
}

// ProduceWorkload sends every rating of w to o.Topic, keyed by movie id and
// partitioned as Java clients do, and adds each to truth (which may be nil).
// It returns once every rating is acknowledged, with how long that took.
func ProduceWorkload(ctx context.Context, o ProduceOptions, w Workload, truth *Truth) (time.Duration, error) {
	if err := w.Validate(); err != nil {
		return 0, err
	}
	sc := engine.NewSaramaConfig("keepstate-bench-produce")
	sc.Producer.Return.Successes = false
	sc.Producer.Return.Errors = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Partitioner = engine.NewJavaPartitioner
	sc.Producer.Flush.Bytes = 512 << 10
	sc.Producer.Flush.Frequency = 5 * time.Millisecond
	sc.ChannelBufferSize = 4096
	if err := app.EnsureTopic(o.Brokers, sc, o.Topic, o.Partitions); err != nil {
		return 0, err
	}
	prod, err := sarama.NewAsyncProducer(o.Brokers, sc)
	if err != nil {
		return 0, fmt.Errorf("%w: kafka %v: %w", app.ErrUnavailable, o.Brokers, err)
	}
	var firstErr error
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		for perr := range prod.Errors() {
			if firstErr == nil {
				firstErr = perr.Err
			}
		}
	}()
	start := time.Now()
	next := w.Generator()
	var encErr error
	for r, ok := next(); ok && ctx.Err() == nil; r, ok = next() {
		v, err := o.Encode(ctx, r)
		if err != nil {
			encErr = fmt.Errorf("encode rating: %w", err)
			break
		}
		if truth != nil {
			truth.Add(r)
		}
		m := &sarama.ProducerMessage{Topic: o.Topic, Key: sarama.ByteEncoder(engine.Int64Keys.Append(nil, r.MovieID)),
			Value: sarama.ByteEncoder(v)}
		select {
		case prod.Input() <- m:
		case <-ctx.Done():
		}
	}
	prod.AsyncClose() // flushes what is buffered, then closes Errors
	<-errDone
	if err := cmp.Or(encErr, ctx.Err()); err != nil {
		return 0, err
	}
	if firstErr != nil {
		return 0, fmt.Errorf("produce to %s: %w", o.Topic, firstErr)
	}
	return time.Since(start), nil
}

// RegistryEncoder returns an Encode function for ProduceOptions that
// registers the Rating schema under subject in reg, as Confluent's
// serializer does.
func RegistryEncoder(reg *avro.Registry, subject string) func(context.Context, avro.Rating) ([]byte, error) {
	return func(ctx context.Context, r avro.Rating) ([]byte, error) { return reg.EncodeRating(ctx, subject, r) }
}
