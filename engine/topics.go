package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

// topicMetadataWait bounds how long the engine waits for a topic it saw
// or created to appear in the brokers' metadata.
const topicMetadataWait = 30 * time.Second

// defaultInputPartitions is used when the input topic does not exist and
// Config.Partitions is 0.
const defaultInputPartitions = 3

// topicConfig is the configuration of a topic the engine creates:
// min.insync.replicas when configured; for a topic the engine writes, a
// max.message.bytes that fits MaxRecordBytes whatever the broker's
// default; for the changelog, cleanup.policy=compact. nil when empty.
func (e *Engine) topicConfig(written, compacted bool) map[string]*string {
	entries := map[string]*string{}
	set := func(k, v string) { entries[k] = &v }
	if n := e.cfg.MinInsyncReplicas; n > 0 {
		set("min.insync.replicas", strconv.Itoa(int(n)))
	}
	if written {
		set("max.message.bytes", strconv.Itoa(topicMaxMessageBytes))
	}
	if compacted {
		set("cleanup.policy", "compact")
	}
	if len(entries) == 0 {
		return nil
	}
	return entries
}

// PrepareTopics creates the topics an engine of cfg needs, as Run does,
// and returns the partition count of its repartition and changelog
// topics: the TableSpec.Partitions of its table, for a store that keeps a
// partition's keys together and must know it before the engine runs. The
// error wraps ErrKafkaUnavailable when the brokers cannot be reached.
func PrepareTopics(ctx context.Context, cfg Config) (int32, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	e := &Engine{cfg: cfg, topics: cfg.Topics(), log: cfg.logger(), kafka: saramaKafka{brokers: cfg.Brokers}}
	client, err := e.kafka.NewClient(e.saramaConfig())
	if err != nil {
		return 0, fmt.Errorf("%w: cannot reach brokers %s (%v)", ErrKafkaUnavailable, strings.Join(cfg.Brokers, ","), err)
	}
	defer client.Close()
	e.client = client
	admin, err := e.kafka.NewClusterAdmin(e.saramaConfig())
	if err != nil {
		return 0, fmt.Errorf("%w: admin client: %v", ErrKafkaUnavailable, err)
	}
	defer admin.Close()
	if err := e.ensureTopics(ctx, admin); err != nil {
		return 0, err
	}
	return e.nParts, nil
}

// ensureTopics creates the topics the engine needs and records their
// partition counts. Internal topics get as many partitions as the input
// topic (or Config.Partitions); the changelog is compacted.
func (e *Engine) ensureTopics(ctx context.Context, admin sarama.ClusterAdmin) error {
	existing, err := admin.ListTopics()
	if err != nil {
		return fmt.Errorf("%w: list topics: %v", ErrKafkaUnavailable, err)
	}
	n := e.cfg.Partitions
	if d, ok := existing[e.topics.Input]; ok && n == 0 {
		n = d.NumPartitions
	}
	if n == 0 {
		n = defaultInputPartitions
	}
	want := []struct {
		name    string
		entries map[string]*string
	}{
		{e.topics.Input, e.topicConfig(false, false)},
		{e.topics.Repartition, e.topicConfig(true, false)},
		{e.topics.Changelog, e.topicConfig(true, true)},
		{e.topics.Output, e.topicConfig(true, false)},
		{e.topics.DLQ, e.topicConfig(true, false)},
	}
	for _, w := range want {
		if w.name == "" { // a job without output
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, ok := existing[w.name]; ok {
			continue
		}
		err := admin.CreateTopic(w.name, &sarama.TopicDetail{
			NumPartitions: n, ReplicationFactor: e.cfg.ReplicationFactor, ConfigEntries: w.entries,
		}, false)
		var te *sarama.TopicError
		if err != nil && !(errors.As(err, &te) && te.Err == sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("engine: create topic %s: %w", w.name, err)
		}
		e.log.Info("created topic", "topic", w.name, "partitions", n,
			"replication_factor", e.cfg.ReplicationFactor, "min_insync_replicas", e.cfg.MinInsyncReplicas)
	}
	if err := e.client.RefreshMetadata(); err != nil {
		return fmt.Errorf("%w: metadata: %v", ErrKafkaUnavailable, err)
	}
	count := func(topic string) (int32, error) {
		// A topic created a moment ago (by this instance or by another one
		// starting beside it) may not be in every broker's metadata yet:
		// wait for it rather than fail the start.
		deadline := time.Now().Add(topicMetadataWait)
		for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
			ps, err := e.client.Partitions(topic)
			if err == nil && len(ps) > 0 {
				return int32(len(ps)), nil
			}
			if err == nil {
				err = sarama.ErrUnknownTopicOrPartition // no partitions yet
			}
			if !errors.Is(err, sarama.ErrUnknownTopicOrPartition) || time.Now().After(deadline) {
				return 0, fmt.Errorf("engine: partitions of %s: %w", topic, err)
			}
			if !sleepCtx(ctx, backoff) {
				return 0, ctx.Err()
			}
			_ = e.client.RefreshMetadata(topic)
		}
	}
	if e.nParts, err = count(e.topics.Repartition); err != nil {
		return err
	}
	nc, err := count(e.topics.Changelog)
	if err != nil {
		return err
	}
	if nc != e.nParts {
		return fmt.Errorf("engine: %s has %d partitions but %s has %d: they must be co-partitioned (reset with --reprocess)",
			e.topics.Changelog, nc, e.topics.Repartition, e.nParts)
	}
	if e.topics.Output != "" {
		if e.nOut, err = count(e.topics.Output); err != nil {
			return err
		}
	}
	e.nDLQ, err = count(e.topics.DLQ)
	return err
}
