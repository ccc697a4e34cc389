package engine

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"
)

// Kafka opens the Kafka clients an Engine uses: it is the engine's seam to
// the broker. The default (Config.Kafka nil) is SaramaKafka, which dials
// the configured brokers; tests inject an in-process fake to exercise the
// processing protocol without a broker. Every method receives the sarama
// configuration the engine built for that client (client id, transactional
// id, isolation level, group settings); an implementation may ignore what
// it does not model. Implementations must be safe for concurrent use.
type Kafka interface {
	// NewClient opens the engine's metadata client.
	NewClient(cfg *sarama.Config) (sarama.Client, error)
	// NewSyncProducer opens a producer: the engine's shared idempotent
	// producer, or a transactional one when cfg.Producer.Transaction.ID is
	// set (one per partition and stage under exactly-once; opening one
	// fences every earlier producer with the same id).
	NewSyncProducer(cfg *sarama.Config) (sarama.SyncProducer, error)
	// NewClusterAdmin opens the admin client that creates topics and
	// describes the consumer group.
	NewClusterAdmin(cfg *sarama.Config) (sarama.ClusterAdmin, error)
	// NewConsumerGroup joins consumer group id.
	NewConsumerGroup(group string, cfg *sarama.Config) (sarama.ConsumerGroup, error)
	// NewLog returns the reader of partition offsets and committed records
	// that restores use, on top of client (a client NewClient returned).
	NewLog(client sarama.Client) Log
}

// Log reads one topic's partitions below the consumer API: offsets, and
// committed records decided by their transaction markers (see
// ReadCommitted). The engine restores a partition from the changelog with
// it. Implementations must be safe for concurrent use.
type Log interface {
	// Start returns the first offset of topic/p (the log start offset).
	Start(ctx context.Context, topic string, p int32) (int64, error)
	// StableEnd waits until every transaction below topic/p's high
	// watermark is decided (last stable offset >= high watermark) and
	// returns that high watermark; it gives up when ctx ends.
	StableEnd(ctx context.Context, topic string, p int32) (int64, error)
	// LastStable returns topic/p's last stable offset: every transaction
	// with a record below it is decided. It does not wait.
	LastStable(ctx context.Context, topic string, p int32) (int64, error)
	// ReadCommitted calls fn, in offset order, for each committed record of
	// topic/p in [start, end), skipping aborted ones and control records;
	// the caller has waited for StableEnd >= end. It stops at fn's first
	// error and returns it.
	ReadCommitted(ctx context.Context, topic string, p int32, start, end int64, fn func(CommittedRecord) error) error
}

// SaramaKafka is the Kafka seam over sarama: clients dialed to Brokers.
type SaramaKafka struct {
	// Brokers are the bootstrap servers.
	Brokers []string
}

var _ Kafka = SaramaKafka{}

// NewClient dials a sarama client.
func (k SaramaKafka) NewClient(cfg *sarama.Config) (sarama.Client, error) {
	return sarama.NewClient(k.Brokers, cfg)
}

// NewSyncProducer dials a sarama sync producer.
func (k SaramaKafka) NewSyncProducer(cfg *sarama.Config) (sarama.SyncProducer, error) {
	return sarama.NewSyncProducer(k.Brokers, cfg)
}

// NewClusterAdmin dials a sarama cluster admin.
func (k SaramaKafka) NewClusterAdmin(cfg *sarama.Config) (sarama.ClusterAdmin, error) {
	return sarama.NewClusterAdmin(k.Brokers, cfg)
}

// NewConsumerGroup joins a consumer group with sarama, on a client that
// keeps the session through the loss of the group coordinator (see
// newSaramaGroup).
func (k SaramaKafka) NewConsumerGroup(group string, cfg *sarama.Config) (sarama.ConsumerGroup, error) {
	return newSaramaGroup(k.Brokers, group, cfg)
}

// NewLog returns a Log that sends list-offsets and fetch requests to the
// partition leaders client knows.
func (k SaramaKafka) NewLog(client sarama.Client) Log { return saramaLog{client: client} }

// saramaLog is Log over a sarama client's broker connections.
type saramaLog struct{ client sarama.Client }

func (l saramaLog) Start(_ context.Context, topic string, p int32) (int64, error) {
	n, err := l.client.GetOffset(topic, p, sarama.OffsetOldest)
	if err != nil {
		return 0, fmt.Errorf("start of %s/%d: %w", topic, p, err)
	}
	return n, nil
}

func (l saramaLog) StableEnd(ctx context.Context, topic string, p int32) (int64, error) {
	return waitStable(ctx, l.client, topic, p)
}

func (l saramaLog) LastStable(_ context.Context, topic string, p int32) (int64, error) {
	n, err := listOffset(l.client, topic, p, sarama.ReadCommitted)
	if err != nil {
		return 0, fmt.Errorf("last stable offset of %s/%d: %w", topic, p, err)
	}
	return n, nil
}

func (l saramaLog) ReadCommitted(ctx context.Context, topic string, p int32, start, end int64, fn func(CommittedRecord) error) error {
	r := committedReader{client: l.client, topic: topic, p: p}
	return r.read(ctx, start, end, fn)
}

// kafka returns the configured seam, or SaramaKafka on Config.Brokers.
func (c Config) kafka() Kafka {
	if c.Kafka != nil {
		return c.Kafka
	}
	return SaramaKafka{Brokers: c.Brokers}
}
