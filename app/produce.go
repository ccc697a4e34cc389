package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
)

// ProduceConfig configures `keepstate produce`, the ratings load generator.
type ProduceConfig struct {
	Brokers        []string
	SchemaRegistry string
	// The registry's credentials, as in Config.
	SchemaRegistryUser, SchemaRegistryPassword, SchemaRegistryPasswordFile string

	Topic      string
	Count      int64     // generated ratings to send (0: until ctx ends)
	Movies     int64     // distinct movie ids (1..Movies), popularity Zipf-skewed
	Rate       float64   // ratings per second (0: as fast as possible)
	Seed       uint64    // makes the generated sequence reproducible
	Stdin      io.Reader // when set, read as JSON lines {"movie_id":362,"rating":10} instead
	Partitions int32     // of the topic if it must be created
}

// DefaultProduce returns the produce defaults: 1000 ratings over 100 movies.
func DefaultProduce() ProduceConfig {
	d := Default()
	return ProduceConfig{Brokers: d.Brokers, SchemaRegistry: d.SchemaRegistry, Topic: d.InputTopic,
		Count: 1000, Movies: 100, Rate: 0, Seed: 1, Partitions: 3}
}

// Validate checks the produce settings.
func (p ProduceConfig) Validate() error {
	var errs []error
	if len(p.Brokers) == 0 || p.Topic == "" || p.SchemaRegistry == "" {
		errs = append(errs, errors.New("--brokers, --schema-registry and --topic are required"))
	}
	if p.Count < 0 || p.Movies <= 0 || p.Rate < 0 || math.IsNaN(p.Rate) || p.Partitions <= 0 {
		errs = append(errs, errors.New("--count >= 0, --movies > 0, --rate >= 0 and --partitions > 0 are required"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// Generator produces a reproducible stream of ratings: movie ids Zipf-skewed
// over 1..movies (a few blockbusters, a long tail), ratings multiples of 0.5
// in 0..10 around a per-movie quality. Not safe for concurrent use.
type Generator struct {
	rnd  *rand.Rand
	zipf *rand.Zipf
}

// NewGenerator returns a generator for movies ids 1..movies.
func NewGenerator(movies int64, seed uint64) *Generator {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &Generator{rnd: r, zipf: rand.NewZipf(r, 1.07, 2, uint64(movies-1))}
}

// Next returns the next rating.
func (g *Generator) Next() avro.Rating {
	id := int64(g.zipf.Uint64()) + 1
	quality := float64((uint64(id)*2654435761)%11) * 0.8 // 0..8 per movie
	v := math.Round((quality+g.rnd.NormFloat64()*1.5+1)*2) / 2
	return avro.Rating{MovieID: id, Rating: math.Max(0, math.Min(10, v))}
}

// Produce is `keepstate produce`: it sends Avro ratings (registering the
// schema under <topic>-value as the Confluent serializer does) and returns
// how many it sent.
func Produce(ctx context.Context, p ProduceConfig, log *slog.Logger) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	log = discardLogger(log)
	reg, err := OpenRegistry(ctx, Config{SchemaRegistry: p.SchemaRegistry, SchemaRegistryUser: p.SchemaRegistryUser,
		SchemaRegistryPassword: p.SchemaRegistryPassword, SchemaRegistryPasswordFile: p.SchemaRegistryPasswordFile}, log)
	if err != nil {
		return 0, err
	}
	g, n := NewGenerator(p.Movies, p.Seed), int64(0)
	next := func() (avro.Rating, bool, error) {
		if p.Count > 0 && n >= p.Count {
			return avro.Rating{}, false, nil
		}
		n++
		return g.Next(), true, nil
	}
	if p.Stdin != nil {
		next = jsonLines(p.Stdin)
	}
	subject := avro.ValueSubject(p.Topic)
	return SendRecords(ctx, Sender{Brokers: p.Brokers, Topic: p.Topic, Partitions: p.Partitions, Rate: p.Rate,
		ClientID: "keepstate-produce", Log: log}, func() (Record, bool, error) {
		r, ok, err := next()
		if err != nil || !ok {
			return Record{}, ok, err
		}
		v, err := reg.EncodeRating(ctx, subject, r)
		if err != nil {
			return Record{}, false, fmt.Errorf("encode rating: %w", err)
		}
		return Record{Key: engine.Int64Keys.Append(nil, r.MovieID), Value: v}, true, nil
	})
}

// jsonLines reads {"movie_id":362,"rating":10} per line; blank lines are skipped.
func jsonLines(r io.Reader) func() (avro.Rating, bool, error) {
	sc := bufio.NewScanner(r)
	line := 0
	return func() (avro.Rating, bool, error) {
		for sc.Scan() {
			line++
			b := sc.Bytes()
			if len(bytes.TrimSpace(b)) == 0 {
				continue
			}
			var v struct {
				MovieID *int64   `json:"movie_id"`
				Rating  *float64 `json:"rating"`
			}
			if err := json.Unmarshal(b, &v); err != nil || v.MovieID == nil || v.Rating == nil {
				return avro.Rating{}, false, fmt.Errorf("stdin line %d: want {\"movie_id\":<long>,\"rating\":<double>}, got %q", line, b)
			}
			return avro.Rating{MovieID: *v.MovieID, Rating: *v.Rating}, true, nil
		}
		return avro.Rating{}, false, sc.Err()
	}
}

// EnsureTopic creates topic with n partitions (replication factor 1) when
// it does not exist; `keepstate produce` and `keepstate bench` use it.
func EnsureTopic(brokers []string, sc *sarama.Config, topic string, n int32) error {
	admin, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		return fmt.Errorf("%w: kafka %v: %w; start Kafka or set --brokers (try `keepstate demo`)", ErrUnavailable, brokers, err)
	}
	defer admin.Close()
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: n, ReplicationFactor: 1}, false)
	var te *sarama.TopicError
	if err != nil && !(errors.As(err, &te) && te.Err == sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}
