package engine

import (
	"context"

	"github.com/IBM/sarama"
)

// changelogLog reads the changelog's partitions below the consumer API
// (offsets, and committed records decided by their transaction markers),
// over the engine's metadata client's broker connections.
type changelogLog struct{ client sarama.Client }

// saramaKafka opens the engine's sarama clients, dialed to brokers, each
// with the configuration the engine built for it. With a watch, they are
// refreshed when the watch fences a broker (watchedclients.go).
type saramaKafka struct {
	brokers []string
	watch   *brokerWatch
	// group is the consumer group whose coordinator the producers'
	// transactional offset commits go to.
	group string
}

// NewClient dials the engine's metadata client.
func (k saramaKafka) NewClient(cfg *sarama.Config) (sarama.Client, error) {
	c, err := sarama.NewClient(k.brokers, cfg)
	if err != nil {
		return nil, err
	}
	if k.watch == nil {
		return c, nil
	}
	return &trackedClient{Client: c, untrack: k.watch.track(c, "")}, nil
}

// NewSyncProducer dials a producer: the shared idempotent one, or a
// transactional one when cfg.Producer.Transaction.ID is set (opening one
// fences every earlier producer with the same id).
func (k saramaKafka) NewSyncProducer(cfg *sarama.Config) (sarama.SyncProducer, error) {
	if k.watch == nil {
		return sarama.NewSyncProducer(k.brokers, cfg)
	}
	c, err := sarama.NewClient(k.brokers, cfg)
	if err != nil {
		return nil, err
	}
	p, err := sarama.NewSyncProducerFromClient(c)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &trackedProducer{SyncProducer: p, client: c, untrack: k.watch.track(c, k.group)}, nil
}

// NewClusterAdmin dials the admin client that creates topics and describes
// the consumer group.
func (k saramaKafka) NewClusterAdmin(cfg *sarama.Config) (sarama.ClusterAdmin, error) {
	return sarama.NewClusterAdmin(k.brokers, cfg)
}

// NewConsumerGroup joins consumer group id, on a client that keeps the
// session through the loss of the group coordinator (see newSaramaGroup).
func (k saramaKafka) NewConsumerGroup(group string, cfg *sarama.Config) (sarama.ConsumerGroup, error) {
	g, err := newSaramaGroup(k.brokers, group, cfg)
	if err != nil {
		return nil, err
	}
	if k.watch != nil {
		g.untrack = k.watch.track(g.client, group)
	}
	return g, nil
}

// NewLog returns the changelog reader over client (a client NewClient
// returned): list-offsets and fetch requests to the partition leaders.
func (k saramaKafka) NewLog(client sarama.Client) changelogLog { return changelogLog{client: client} }

// Start returns the first offset of topic/p (the log start offset),
// waiting while the partition has no reachable leader.
func (l changelogLog) Start(ctx context.Context, topic string, p int32) (int64, error) {
	return listOffset(ctx, l.client, topic, p, sarama.OffsetOldest, sarama.ReadUncommitted, "start")
}

// StableEnd waits until every transaction below topic/p's high watermark
// is decided (last stable offset >= high watermark) and returns that high
// watermark; it gives up when ctx ends.
func (l changelogLog) StableEnd(ctx context.Context, topic string, p int32) (int64, error) {
	return waitStable(ctx, l.client, topic, p)
}

// LastStable returns topic/p's last stable offset: every transaction with
// a record below it is decided. It does not wait for open transactions,
// only while the partition has no reachable leader.
func (l changelogLog) LastStable(ctx context.Context, topic string, p int32) (int64, error) {
	return listOffset(ctx, l.client, topic, p, sarama.OffsetNewest, sarama.ReadCommitted, "last stable offset")
}

// ReadCommitted calls fn, in offset order, for each committed record of
// topic/p in [start, end), skipping aborted ones and control records; the
// caller has waited for StableEnd >= end. It stops at fn's first error and
// returns it.
func (l changelogLog) ReadCommitted(ctx context.Context, topic string, p int32, start, end int64, fn func(CommittedRecord) error) error {
	r := committedReader{client: l.client, topic: topic, p: p}
	return r.read(ctx, start, end, fn)
}
