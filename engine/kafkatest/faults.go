package kafkatest

import (
	"fmt"
	"slices"
	"strings"
)

// Operation kinds, as Op.Kind and Event.Kind name them.
const (
	OpInitProducer = "init-producer" // NewSyncProducer with a transactional id
	OpBegin        = "begin"         // BeginTxn
	OpSend         = "send"          // SendMessages, once per topic of the batch
	OpAddOffsets   = "add-offsets"   // AddOffsetsToTxnWithGroupMetadata
	OpCommit       = "commit"        // CommitTxn
	OpAbort        = "abort"         // AbortTxn
	OpJoin         = "join"          // ConsumerGroup.Consume joining the group
	OpOffsetCommit = "offset-commit" // session Commit (non-transactional)
	OpHeartbeat    = "heartbeat"     // a group heartbeat sent through a client (engine.GroupHeartbeater)
	// OpFenced is only an event: a producer fenced by a newer one with the
	// same transactional id (its open transaction aborted).
	OpFenced = "fenced"
)

// Op describes an operation about to happen, for fault injection. Fields
// that do not apply to the kind are empty.
type Op struct {
	// Kind is one of the Op* constants.
	Kind string
	// TxnID is the producer's transactional id ("" for a producer outside
	// transactions).
	TxnID string
	// Topic is the topic of OpSend.
	Topic string
	// Group is the consumer group of OpJoin, OpAddOffsets, OpOffsetCommit
	// and OpHeartbeat.
	Group string
}

// matches reports whether op matches pattern m: each non-empty field of m
// must equal op's.
func (m Op) matches(op Op) bool {
	return (m.Kind == "" || m.Kind == op.Kind) && (m.TxnID == "" || m.TxnID == op.TxnID) &&
		(m.Topic == "" || m.Topic == op.Topic) && (m.Group == "" || m.Group == op.Group)
}

type pendingFault struct {
	match Op
	err   error
}

// FailNext makes the next operation matching match (empty fields match
// anything) fail with err, once. Faults queue in call order. A fencing
// error (sarama.ErrProducerFenced or ErrInvalidProducerEpoch) at OpCommit
// fences the producer as a newer one would, aborting its transaction; any
// other error there leaves the transaction open and abortable.
func (c *Cluster) FailNext(match Op, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, pendingFault{match: match, err: err})
}

// SetFault installs fn, consulted before every operation (after the
// FailNext queue): a non-nil result fails the operation. nil removes it.
// fn runs with the cluster's lock held: it must not call the Cluster.
func (c *Cluster) SetFault(fn func(Op) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fault = fn
}

// faultLocked returns the injected error for op, if any, and logs it as a
// failed event. The caller holds c.mu.
func (c *Cluster) faultLocked(op Op) error {
	var err error
	if i := slices.IndexFunc(c.pending, func(f pendingFault) bool { return f.match.matches(op) }); i >= 0 {
		err = c.pending[i].err
		c.pending = slices.Delete(c.pending, i, i+1)
	} else if c.fault != nil {
		err = c.fault(op)
	}
	if err != nil {
		c.eventLocked(Event{Kind: op.Kind, TxnID: op.TxnID, Topic: op.Topic, Group: op.Group, Err: err})
	}
	return err
}

// Event is one entry of the cluster's event log: a Kafka operation that
// happened (or failed, Err set), or a note a test added with Note.
type Event struct {
	// Seq numbers events from 1 in the order they happened.
	Seq int
	// Kind is an Op* constant, or the kind given to Note.
	Kind string
	// TxnID is the transactional id of the producer involved.
	TxnID string
	// Topic is the topic of a send (one event per topic of a batch) or of
	// committed offsets.
	Topic string
	// Group is the consumer group of an offset commit or join.
	Group string
	// Detail is free text: a Note's text, or the offsets committed.
	Detail string
	// Err is the error the operation failed with; nil when it happened.
	Err error
}

// String renders e as "kind txn topic detail [err]", skipping empty fields.
func (e Event) String() string {
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

func (c *Cluster) eventLocked(e Event) {
	e.Seq = len(c.events) + 1
	c.events = append(c.events, e)
}

// Note appends an event of kind with detail to the event log, so that
// tests can order their own actions (a store write) among the cluster's.
func (c *Cluster) Note(kind, detail string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eventLocked(Event{Kind: kind, Detail: detail})
}

// Events returns a copy of the event log, in order.
func (c *Cluster) Events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.events...)
}
