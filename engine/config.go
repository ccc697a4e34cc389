package engine

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Config configures an Engine. Start from DefaultConfig and set Brokers.
type Config struct {
	// Brokers are the Kafka bootstrap servers.
	Brokers []string
	// ApplicationID is the consumer group id and the prefix of internal topics.
	ApplicationID string
	// InputTopic holds the job's input records.
	InputTopic string
	// OutputTopic receives the job's output records (Job.Output); it may
	// be empty for a job without output.
	OutputTopic string
	// RepartitionTopic, ChangelogTopic and DLQTopic name the internal
	// topics; empty derives them from ApplicationID (see Topics).
	RepartitionTopic, ChangelogTopic, DLQTopic string
	// CommitInterval is how often tasks flush state and commit offsets.
	CommitInterval time.Duration
	// IdleFlush flushes a partition before CommitInterval once its input
	// has stayed empty this long and it has read every record the broker
	// holds (at most once per 100 ms; see idleFlushGap). It must exceed the
	// rekey stage's commit period (250 ms). 0 turns it off.
	IdleFlush time.Duration
	// CacheMaxDocs flushes a partition early when it holds this many changed
	// documents, and bounds how many documents a partition keeps cached
	// between flushes (the least recently used go first); CacheBudgetDocs
	// may lower it.
	CacheMaxDocs int
	// CacheBudgetDocs bounds the documents all partitions of the engine
	// cache together, like Kafka Streams' statestore.cache.max.bytes: each
	// partition's bound is the budget divided by the partitions owned, at
	// most CacheMaxDocs and at least MinPartitionCacheDocs (or CacheMaxDocs
	// when smaller), so cache memory does not grow with the partitions a
	// failover moves here. 0 turns the budget off.
	CacheBudgetDocs int
	// BufferedRecords is how many fetched records each claimed partition
	// buffers ahead of its stage (sarama's ChannelBufferSize), like Kafka
	// Streams' buffered.records.per.partition; a smaller buffer means
	// smaller batches (see docs/benchmarks.md).
	BufferedRecords int
	// InstanceID enables static group membership when non-empty.
	InstanceID string
	// Partitions of the topics the engine creates; 0 means as many as the input topic.
	Partitions int32
	// ReplicationFactor of the topics the engine creates.
	ReplicationFactor int16
	// MinInsyncReplicas, when positive, is min.insync.replicas of the
	// topics the engine creates: how many replicas must have a record
	// before an acks=all write succeeds. 0 keeps the broker's default.
	MinInsyncReplicas int16
	// AdvertiseAddr is the host:port other instances use to reach this
	// instance's API; it travels in the group membership metadata so that
	// queries for keys owned elsewhere can be routed (see Owner).
	AdvertiseAddr string
	// SessionTimeout is the consumer group session timeout: how long a
	// silent member keeps its partitions.
	SessionTimeout time.Duration
	// ProcessingGuarantee is ExactlyOnce (Kafka transactions, the default)
	// or AtLeastOnce (for brokers without transactions; unsafe against an
	// instance that wakes up after losing its partitions, see Guarantee).
	ProcessingGuarantee Guarantee
	// TransactionTimeout is how long the broker waits before it aborts a
	// transaction its producer left open (a crashed or paused instance).
	// The default, 30 s, outlasts Kafka's failure detection (7.5-13 s), so
	// a transaction whose coordinator was lost commits on the new one. It
	// delays no move: the next owner's producer aborts it at once.
	TransactionTimeout time.Duration
	// StaleDropAfter, when positive, deletes a partition's documents from
	// an InstanceLocal store this long after the partition moved away (see
	// stale.go); 0 keeps them.
	StaleDropAfter time.Duration
	// StandbyReplicas is how many other instances keep a standby copy of
	// each partition, tailing its changelog into their own store, so that
	// the partition can move to one of them with a short replay (see
	// assign.go). Only an InstanceLocal store has standbys.
	StandbyReplicas int
	// AcceptableLag is how many changelog records a member may be behind
	// on a partition and still be given it as active; the assignor places
	// a warm-up where the balance wants the partition and moves it once
	// the warm-up is this close.
	AcceptableLag int64
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults: application id keepstate, topics
// input and output, 1 s commit interval, 10000 cached documents.
func DefaultConfig() Config {
	return Config{
		Brokers:           []string{"localhost:9092"},
		ApplicationID:     "keepstate",
		InputTopic:        "input",
		OutputTopic:       "output",
		CommitInterval:    time.Second,
		IdleFlush:         300 * time.Millisecond,
		CacheMaxDocs:      10000,
		CacheBudgetDocs:   30000,
		BufferedRecords:   2048,
		ReplicationFactor: 1,
		SessionTimeout:    10 * time.Second,
		StandbyReplicas:   1,
		AcceptableLag:     10000,

		ProcessingGuarantee: ExactlyOnce,
		TransactionTimeout:  30 * time.Second,
	}
}

// Validate reports every invalid field, wrapping ErrInvalid.
func (c Config) Validate() error {
	var errs []error
	for _, check := range []struct {
		bad bool
		msg string
	}{
		{len(c.Brokers) == 0, "no brokers"},
		{c.ApplicationID == "" || c.InputTopic == "", "application id and input topic must be set"},
		{c.CommitInterval <= 0, "commit interval must be positive"},
		{c.IdleFlush < 0, "idle flush must not be negative"},
		{c.SessionTimeout < time.Second, "session timeout must be at least 1s"},
		{c.CacheMaxDocs <= 0, "cache max docs must be positive"},
		{c.CacheBudgetDocs < 0, "cache budget docs must not be negative"},
		{c.BufferedRecords <= 0, "buffered records must be positive"},
		{c.ProcessingGuarantee != ExactlyOnce && c.ProcessingGuarantee != AtLeastOnce,
			fmt.Sprintf("processing guarantee %q: want %s or %s", c.ProcessingGuarantee, ExactlyOnce, AtLeastOnce)},
		{c.ProcessingGuarantee == ExactlyOnce && (c.TransactionTimeout < time.Second || c.TransactionTimeout > 15*time.Minute),
			"transaction timeout must be between 1s and 15m (the broker's transaction.max.timeout.ms default)"},
		{c.StandbyReplicas < 0 || c.StandbyReplicas > 8, "standby replicas must be between 0 and 8"},
		{c.AcceptableLag < 0, "acceptable lag must not be negative"},
		{c.MinInsyncReplicas < 0 || c.MinInsyncReplicas > c.ReplicationFactor, fmt.Sprintf(
			"min insync replicas %d: want 0 (the broker's default) up to the replication factor %d",
			c.MinInsyncReplicas, c.ReplicationFactor)},
		{c.ReplicationFactor < 1 || c.Partitions < 0, "replication factor must be >= 1 and partitions >= 0"},
	} {
		if check.bad {
			errs = append(errs, errors.New(check.msg))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("engine config: %w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// logger returns c.Logger, or one that discards when it is nil.
func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c.Logger
}

// Guarantee is a processing guarantee.
type Guarantee string

// Processing guarantees.
const (
	// ExactlyOnce flushes each task in a Kafka transaction: its changelog
	// and output records and its input offsets commit together, and the
	// broker refuses the transaction of an instance that lost the
	// partition (a paused or partitioned "zombie"). Readers of the output
	// topic should use isolation.level=read_committed. Needs Kafka 2.5+.
	ExactlyOnce Guarantee = "exactly_once"
	// AtLeastOnce flushes without transactions. Crashes stay exact through
	// the version checks, but a zombie's late flush can still reach the
	// changelog and the output topic and overwrite newer values there.
	AtLeastOnce Guarantee = "at_least_once"
)

// Topics are the names of the topics an application uses.
type Topics struct {
	Input, Output, Repartition, Changelog, DLQ string
}

// Topics returns the topic names: the internal ones as set, or derived from
// the application id: <id>-repartition, <id>-changelog and <id>-dlq.
func (c Config) Topics() Topics {
	return Topics{Input: c.InputTopic, Output: c.OutputTopic,
		Repartition: cmp.Or(c.RepartitionTopic, c.ApplicationID+"-repartition"),
		Changelog:   cmp.Or(c.ChangelogTopic, c.ApplicationID+"-changelog"),
		DLQ:         cmp.Or(c.DLQTopic, c.ApplicationID+"-dlq")}
}
