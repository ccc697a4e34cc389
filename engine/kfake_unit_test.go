package engine_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keepstate/keepstate/internal/testkit"
)

// kcluster is the in-process Kafka (kfake) an engine unit test runs on,
// with an ordered log of the Kafka requests that mark the processing
// protocol's steps, to which tests add their own entries (store writes),
// fault injection that marks the requests it fails in that log, and
// readers of what a partition holds.
type kcluster struct {
	kc      *kfake.Cluster
	brokers []string
	cl      *kgo.Client // appends records; flushed by hand, so a call's records go in one batch

	appendMu sync.Mutex // one append at a time: a flush sends every buffered record

	mu     sync.Mutex
	events []event
}

// Event kinds: one per request the log records, named after its step.
const (
	evInitProducer  = "init-producer"  // InitProducerID with a transactional id
	evAddPartitions = "add-partitions" // AddPartitionsToTxn: a transaction's first request
	evSend          = "send"           // Produce, one event per topic of the request
	evAddOffsets    = "add-offsets"    // AddOffsetsToTxn
	evTxnOffsets    = "txn-offsets"    // TxnOffsetCommit, one event per topic
	evCommit        = "commit"         // EndTxn committing
	evAbort         = "abort"          // EndTxn aborting
	evJoin          = "join"           // JoinGroup
	evOffsetCommit  = "offset-commit"  // OffsetCommit, one event per topic
	evHeartbeat     = "heartbeat"      // Heartbeat
)

// event is one entry of the log: a request the cluster received (Err set
// when an injected fault failed it), or a note a test added.
type event struct {
	Seq    int
	Kind   string
	TxnID  string
	Topic  string
	Group  string
	Detail string
	Err    error
	req    kmsg.Request
}

// String renders e as "kind txn topic group detail [err]", skipping empty
// fields.
func (e event) String() string {
	parts := []string{e.Kind}
	for _, s := range []string{e.TxnID, e.Topic, e.Group, e.Detail} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	if e.Err != nil {
		parts = append(parts, fmt.Sprintf("err=%v", e.Err))
	}
	return strings.Join(parts, " ")
}

// newCluster starts a one-broker kfake cluster for t, closed by t's
// cleanup, and starts logging requests.
func newCluster(t testing.TB) *kcluster {
	t.Helper()
	k := testkit.StartKfake(t, testkit.WithPartitions(1))
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ManualFlushing())
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	c := &kcluster{kc: k.Cluster(), brokers: k.Brokers(), cl: cl}
	for _, key := range []kmsg.Key{kmsg.InitProducerID, kmsg.AddPartitionsToTxn, kmsg.Produce, kmsg.AddOffsetsToTxn,
		kmsg.TxnOffsetCommit, kmsg.EndTxn, kmsg.JoinGroup, kmsg.OffsetCommit, kmsg.Heartbeat} {
		// An observer that never handles a request stays installed.
		c.kc.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.observe(req)
			return nil, nil, false
		})
	}
	// kfake expires a member whose JoinGroup waits for the others past its
	// session timeout, and never answers that join (a broker keeps a member
	// awaiting a join alive); the engine's one-second sessions make that
	// likely while another member finishes its session. Members are kept
	// longer than they ask; the engine still believes its own timeout.
	c.stretchSessions(30 * time.Second)
	return c
}

// observe logs req. It runs on the cluster's goroutine, before faults are
// checked, so the log's order is the order the cluster handled requests.
func (c *kcluster) observe(req kmsg.Request) {
	var evs []event
	switch r := req.(type) {
	case *kmsg.InitProducerIDRequest:
		if r.TransactionalID != nil {
			evs = append(evs, event{Kind: evInitProducer, TxnID: *r.TransactionalID})
		}
	case *kmsg.AddPartitionsToTxnRequest:
		if r.TransactionalID != "" {
			evs = append(evs, event{Kind: evAddPartitions, TxnID: r.TransactionalID})
		}
		for _, tx := range r.Transactions {
			evs = append(evs, event{Kind: evAddPartitions, TxnID: tx.TransactionalID})
		}
	case *kmsg.ProduceRequest:
		txn := ""
		if r.TransactionID != nil {
			txn = *r.TransactionID
		}
		for _, tp := range r.Topics {
			evs = append(evs, event{Kind: evSend, TxnID: txn, Topic: tp.Topic})
		}
	case *kmsg.AddOffsetsToTxnRequest:
		evs = append(evs, event{Kind: evAddOffsets, TxnID: r.TransactionalID, Group: r.Group})
	case *kmsg.TxnOffsetCommitRequest:
		for _, tp := range r.Topics {
			var offs []string
			for _, p := range tp.Partitions {
				offs = append(offs, fmt.Sprintf("%d=%d", p.Partition, p.Offset))
			}
			evs = append(evs, event{Kind: evTxnOffsets, TxnID: r.TransactionalID, Group: r.Group, Topic: tp.Topic, Detail: strings.Join(offs, " ")})
		}
	case *kmsg.EndTxnRequest:
		kind := evAbort
		if r.Commit {
			kind = evCommit
		}
		evs = append(evs, event{Kind: kind, TxnID: r.TransactionalID})
	case *kmsg.JoinGroupRequest:
		evs = append(evs, event{Kind: evJoin, Group: r.Group, Detail: r.MemberID})
	case *kmsg.OffsetCommitRequest:
		for _, tp := range r.Topics {
			evs = append(evs, event{Kind: evOffsetCommit, Group: r.Group, Topic: tp.Topic})
		}
	case *kmsg.HeartbeatRequest:
		evs = append(evs, event{Kind: evHeartbeat, Group: r.Group})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range evs {
		e.req = req
		c.appendLocked(e)
	}
}

func (c *kcluster) appendLocked(e event) {
	e.Seq = len(c.events) + 1
	c.events = append(c.events, e)
}

// note appends an event of kind with detail to the log, so that tests can
// order their own actions (a store write) among the cluster's.
func (c *kcluster) note(kind, detail string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.appendLocked(event{Kind: kind, Detail: detail})
}

// Events returns a copy of the log, in order.
func (c *kcluster) Events() []event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

// fail installs fault f (see kfake.Fault): the matching requests are
// answered with f.Err (UNKNOWN_SERVER_ERROR when nil) instead of being
// applied, and their events in the log get that error.
func (c *kcluster) fail(f kfake.Fault) *kfake.FaultHandle {
	if f.Err == nil {
		f.Err = kerr.UnknownServerError
	}
	when, err, topic := f.When, f.Err, f.Topic
	f.When = func(req kmsg.Request) bool {
		if when != nil && !when(req) {
			return false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for i := range c.events {
			if e := &c.events[i]; e.req == req && (topic == "" || e.Topic == topic) {
				e.Err = err
			}
		}
		return true
	}
	return c.kc.Fault(f)
}

// producedBy matches a Produce request of transactional id txn.
func producedBy(txn string) func(kmsg.Request) bool {
	return func(req kmsg.Request) bool {
		r, ok := req.(*kmsg.ProduceRequest)
		return ok && r.TransactionID != nil && *r.TransactionID == txn
	}
}

// CreateTopic creates topic with n partitions.
func (c *kcluster) CreateTopic(topic string, n int32) error {
	return c.kc.CreateTopic(topic, n, nil)
}

// Partitions returns the partition count of topic, 0 when it does not exist.
func (c *kcluster) Partitions(topic string) int32 {
	return int32(len(c.kc.PartitionInfos(topic)))
}

// DeleteRecords raises the log start offset of topic/p to before.
func (c *kcluster) DeleteRecords(topic string, p int32, before int64) error {
	return c.kc.DeleteRecords(topic, p, before)
}

// header is a record header for Append.
type header struct {
	Key   string
	Value []byte
}

// Append writes one record to topic/p outside any transaction and returns
// its offset.
func (c *kcluster) Append(topic string, p int32, key, value []byte, headers ...header) (int64, error) {
	r := &kgo.Record{Topic: topic, Partition: p, Key: key, Value: value}
	for _, h := range headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	if err := c.appendBatch(r); err != nil {
		return 0, err
	}
	return r.Offset, nil
}

// appendBatch writes records outside any transaction in one produce
// request (one batch per partition), so that a reader gets them at once.
func (c *kcluster) appendBatch(records ...*kgo.Record) error {
	c.appendMu.Lock()
	defer c.appendMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), unitTimeout)
	defer cancel()
	errs := make(chan error, len(records))
	for _, r := range records {
		c.cl.Produce(ctx, r, func(_ *kgo.Record, err error) { errs <- err })
	}
	if err := c.cl.Flush(ctx); err != nil {
		return err
	}
	for range records {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// recordState is a stored record's transactional state.
type recordState int

const (
	// stateCommitted: written outside a transaction or by a committed one.
	stateCommitted recordState = iota
	// stateOpen: in a transaction still open.
	stateOpen
	// stateAborted: in an aborted transaction, never visible.
	stateAborted
	// stateMarker: a transaction's commit or abort control record.
	stateMarker
)

func (s recordState) String() string {
	return [...]string{"committed", "open", "aborted", "marker"}[s]
}

// storedRecord is one record of a partition as Records returns it.
type storedRecord struct {
	Offset  int64
	Key     []byte
	Value   []byte
	Headers map[string]string
	State   recordState
}

// Records returns every record of topic/p still in the log, markers
// included, in offset order, with its state. A transactional record's
// state is decided by the next control record of its producer after it.
func (c *kcluster) Records(topic string, p int32) ([]storedRecord, error) {
	info := c.kc.PartitionInfo(topic, p)
	if info == nil {
		return nil, fmt.Errorf("%s/%d: %w", topic, p, kerr.UnknownTopicOrPartition)
	}
	if info.LogStartOffset >= info.HighWatermark {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(info.LogStartOffset)}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), unitTimeout)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) == 0 || recs[len(recs)-1].Offset < info.HighWatermark-1 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s/%d to %d: %w", topic, p, info.HighWatermark, err)
		}
		recs = append(recs, fs.Records()...)
	}
	out := make([]storedRecord, 0, len(recs))
	for i, r := range recs {
		if r.Offset >= info.HighWatermark {
			break
		}
		s := storedRecord{Offset: r.Offset, Key: r.Key, Value: r.Value, Headers: map[string]string{}}
		for _, h := range r.Headers {
			s.Headers[h.Key] = string(h.Value)
		}
		switch {
		case r.Attrs.IsControl():
			s.State = stateMarker
		case r.Attrs.IsTransactional():
			s.State = stateOpen
			for _, m := range recs[i+1:] {
				if m.Attrs.IsControl() && m.ProducerID == r.ProducerID && len(m.Key) >= 4 {
					s.State = stateAborted
					if binary.BigEndian.Uint16(m.Key[2:]) == 1 { // control type 1: commit
						s.State = stateCommitted
					}
					break
				}
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// CommittedRecords returns the records of topic/p a read_committed reader
// sees: committed data records below the first open one.
func (c *kcluster) CommittedRecords(topic string, p int32) ([]storedRecord, error) {
	all, err := c.Records(topic, p)
	if err != nil {
		return nil, err
	}
	var out []storedRecord
	for _, r := range all {
		if r.State == stateOpen {
			break
		}
		if r.State == stateCommitted {
			out = append(out, r)
		}
	}
	return out, nil
}

// CommittedOffset returns group's committed offset of topic/p.
func (c *kcluster) CommittedOffset(group, topic string, p int32) (int64, bool) {
	gi := c.kc.GroupInfo(group)
	if gi == nil {
		return 0, false
	}
	cm, ok := gi.Commits[topic][p]
	return cm.Offset, ok
}

// stretchSessions makes the cluster keep every group member joining from
// now on for d without heartbeats, whatever session timeout it asks for:
// the member itself still believes its own timeout. It must not be called
// from a control function.
func (c *kcluster) stretchSessions(d time.Duration) {
	c.kc.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		req.(*kmsg.JoinGroupRequest).SessionTimeoutMillis = int32(d / time.Millisecond)
		return nil, nil, false
	})
}
