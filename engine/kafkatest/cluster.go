package kafkatest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// RecordState is the transactional state of a stored record.
type RecordState int

// Record states.
const (
	// Committed records are visible to read_committed readers: written
	// outside a transaction, or by a committed one.
	Committed RecordState = iota
	// Open records belong to a transaction still open: read_committed
	// readers stop before the first of them (the last stable offset).
	Open
	// Aborted records belong to an aborted transaction: never visible.
	Aborted
	// Marker is a transaction's commit or abort control record: it takes
	// an offset but carries no data.
	Marker
)

// String returns the state's name.
func (s RecordState) String() string {
	switch s {
	case Committed:
		return "committed"
	case Open:
		return "open"
	case Aborted:
		return "aborted"
	case Marker:
		return "marker"
	}
	return fmt.Sprintf("RecordState(%d)", int(s))
}

// Record is one stored record, as Cluster.Records returns it.
type Record struct {
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []*sarama.RecordHeader
	Timestamp time.Time
	// State is the record's state when Records was called.
	State RecordState
	// TxnID is the transactional id of the producer that wrote it ("" for
	// a record written outside a transaction).
	TxnID string
}

// record is a stored record; txn is nil outside a transaction.
type record struct {
	offset    int64
	key       []byte
	value     []byte
	headers   []*sarama.RecordHeader
	timestamp time.Time
	txn       *txn
	marker    bool
}

func (r *record) state() RecordState {
	switch {
	case r.marker:
		return Marker
	case r.txn == nil:
		return Committed
	}
	return r.txn.state
}

// visible reports whether a read_committed reader delivers r.
func (r *record) visible() bool { return r.state() == Committed }

// partition is one partition's log: records[i] has offset start+i.
type partition struct {
	start   int64 // log start offset
	records []*record
}

func (p *partition) end() int64 { return p.start + int64(len(p.records)) }

// stableEnd is the last stable offset: the first offset of an open
// transaction, or the high watermark.
func (p *partition) stableEnd() int64 {
	for _, r := range p.records {
		if r.state() == Open {
			return r.offset
		}
	}
	return p.end()
}

// topic is a topic's partitions and creation details.
type topic struct {
	detail sarama.TopicDetail
	parts  []*partition
}

// Cluster is an in-memory Kafka cluster. Create it with New; it implements
// engine.Kafka (NewClient, NewSyncProducer, NewClusterAdmin,
// NewConsumerGroup, NewLog). All methods are safe for concurrent use.
type Cluster struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change (see notifyLocked)

	topics    map[string]*topic
	producers map[string]*producer // live transactional producer per transactional id
	groups    map[string]*group

	fault   func(Op) error
	pending []pendingFault
	events  []Event

	nextMember int
	// RebalanceTimeout bounds how long a rebalance waits for every member
	// to rejoin before it evicts the missing ones. Set it before use.
	RebalanceTimeout time.Duration
}

// New returns an empty cluster.
func New() *Cluster {
	return &Cluster{
		changed:          make(chan struct{}),
		topics:           map[string]*topic{},
		producers:        map[string]*producer{},
		groups:           map[string]*group{},
		RebalanceTimeout: 3 * time.Second,
	}
}

// notifyLocked wakes every waiter (claims feeding messages, StableEnd,
// joins). The caller holds c.mu.
func (c *Cluster) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait waits until the cluster changes after the caller read ch (taken
// under c.mu), ctx ends, or poll passes; it reports whether ctx is live.
func wait(ctx context.Context, ch <-chan struct{}, poll time.Duration) bool {
	t := time.NewTimer(poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-ch:
	case <-t.C:
	}
	return true
}

// CreateTopic creates topic name with n partitions; it returns a
// *sarama.TopicError wrapping sarama.ErrTopicAlreadyExists when it exists.
func (c *Cluster) CreateTopic(name string, n int32) error {
	return c.createTopic(name, &sarama.TopicDetail{NumPartitions: n, ReplicationFactor: 1})
}

func (c *Cluster) createTopic(name string, d *sarama.TopicDetail) error {
	if d == nil || d.NumPartitions <= 0 || name == "" {
		return &sarama.TopicError{Err: sarama.ErrInvalidPartitions}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.topics[name]; ok {
		return &sarama.TopicError{Err: sarama.ErrTopicAlreadyExists}
	}
	t := &topic{detail: *d, parts: make([]*partition, d.NumPartitions)}
	t.detail.ConfigEntries = maps.Clone(d.ConfigEntries)
	for i := range t.parts {
		t.parts[i] = &partition{}
	}
	c.topics[name] = t
	c.notifyLocked()
	return nil
}

// partLocked returns topic/p or sarama.ErrUnknownTopicOrPartition.
func (c *Cluster) partLocked(topic string, p int32) (*partition, error) {
	t, ok := c.topics[topic]
	if !ok || p < 0 || int(p) >= len(t.parts) {
		return nil, fmt.Errorf("%s/%d: %w", topic, p, sarama.ErrUnknownTopicOrPartition)
	}
	return t.parts[p], nil
}

// appendLocked appends a record to topic/p and returns its offset.
func (c *Cluster) appendLocked(pt *partition, r *record) int64 {
	r.offset = pt.end()
	if r.timestamp.IsZero() {
		r.timestamp = time.Now()
	}
	pt.records = append(pt.records, r)
	return r.offset
}

// Append writes one committed record to topic/p outside any transaction
// (as a plain producer would) and returns its offset.
func (c *Cluster) Append(topic string, p int32, key, value []byte, headers ...sarama.RecordHeader) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pt, err := c.partLocked(topic, p)
	if err != nil {
		return 0, err
	}
	off := c.appendLocked(pt, &record{key: key, value: value, headers: headerPtrs(headers)})
	c.notifyLocked()
	return off, nil
}

// DeleteRecords raises the log start offset of topic/p to before (as
// retention or the DeleteRecords API would): the records below it are
// gone.
func (c *Cluster) DeleteRecords(topic string, p int32, before int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pt, err := c.partLocked(topic, p)
	if err != nil {
		return err
	}
	before = min(before, pt.end())
	if before > pt.start {
		pt.records = pt.records[before-pt.start:]
		pt.start = before
		c.notifyLocked()
	}
	return nil
}

// Records returns every record of topic/p still in the log, in offset
// order, with its current state (committed, open, aborted, marker).
func (c *Cluster) Records(topic string, p int32) ([]Record, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pt, err := c.partLocked(topic, p)
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(pt.records))
	for _, r := range pt.records {
		rec := Record{Offset: r.offset, Key: r.key, Value: r.value, Headers: r.headers, Timestamp: r.timestamp, State: r.state()}
		if r.txn != nil {
			rec.TxnID = r.txn.id
		}
		out = append(out, rec)
	}
	return out, nil
}

// CommittedRecords returns the records of topic/p a read_committed reader
// sees: committed data records below the last stable offset.
func (c *Cluster) CommittedRecords(topic string, p int32) ([]Record, error) {
	all, err := c.Records(topic, p)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, r := range all {
		if r.State == Open {
			break
		}
		if r.State == Committed {
			out = append(out, r)
		}
	}
	return out, nil
}

// HighWatermark returns the end offset of topic/p (one past its last
// record, markers included).
func (c *Cluster) HighWatermark(topic string, p int32) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pt, err := c.partLocked(topic, p)
	if err != nil {
		return 0, err
	}
	return pt.end(), nil
}

// Topics returns the names of the topics, sorted.
func (c *Cluster) Topics() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.topics))
}

// Partitions returns the partition count of topic, or 0 when it does not
// exist.
func (c *Cluster) Partitions(topic string) int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.topics[topic]; ok {
		return int32(len(t.parts))
	}
	return 0
}

// headerPtrs converts producer headers to consumer headers.
func headerPtrs(hs []sarama.RecordHeader) []*sarama.RecordHeader {
	if len(hs) == 0 {
		return nil
	}
	out := make([]*sarama.RecordHeader, len(hs))
	for i := range hs {
		out[i] = &sarama.RecordHeader{Key: bytes.Clone(hs[i].Key), Value: bytes.Clone(hs[i].Value)}
	}
	return out
}
