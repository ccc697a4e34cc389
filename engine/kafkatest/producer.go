package kafkatest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

// txn is one transaction of a transactional producer.
type txn struct {
	id      string // transactional id
	state   RecordState
	touched map[*partition]bool
	offsets []txnOffsets
}

// txnOffsets are offsets added to a transaction with their group metadata.
type txnOffsets struct {
	offsets map[string][]*sarama.PartitionOffsetMetadata
	meta    sarama.ConsumerGroupMetadata
}

// producer is a sarama.SyncProducer on the cluster. Its state is guarded
// by the cluster's lock.
type producer struct {
	sarama.SyncProducer // methods the engine does not call: not modelled
	c                   *Cluster
	txnID               string // "" for a producer outside transactions
	closed              bool
	fenced              bool
	fatal               error // a fatal error: every later transactional call fails with it
	cur                 *txn  // the open transaction
	abortable           error
	// ending is set when a commit or abort of cur failed with
	// ErrCoordinatorLost: like sarama once its retries are spent, the
	// producer stays committing or aborting, without an error flag, and
	// the call may be made again.
	ending bool
}

// ErrCoordinatorLost, injected into a commit or abort (FailNext, SetFault),
// models sarama giving up on an EndTxn whose transaction coordinator did
// not answer (its broker died and Kafka has not yet elected another): the
// call fails, the transaction stays open and the producer in its ending
// state (TxnStatus: EndTransaction, no error flag), so that the commit or
// the abort can be tried again. It wraps sarama.ErrNotCoordinatorForConsumer.
var ErrCoordinatorLost = fmt.Errorf("kafkatest: transaction coordinator lost: %w", sarama.ErrNotCoordinatorForConsumer)

var _ sarama.SyncProducer = (*producer)(nil)

// newProducer opens a producer; a transactional id fences the previous
// producer with that id and aborts its open transaction, as
// InitProducerId does.
func (c *Cluster) newProducer(cfg *sarama.Config) (*producer, error) {
	p := &producer{c: c}
	if cfg != nil {
		p.txnID = cfg.Producer.Transaction.ID
	}
	if p.txnID == "" {
		return p, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.faultLocked(Op{Kind: OpInitProducer, TxnID: p.txnID}); err != nil {
		return nil, fmt.Errorf("init producer id %s: %w", p.txnID, err)
	}
	if old := c.producers[p.txnID]; old != nil {
		old.fenceLocked()
	}
	c.producers[p.txnID] = p
	return p, nil
}

// fenceLocked fences p: its open transaction is aborted and every later
// transactional call fails with sarama.ErrProducerFenced.
func (p *producer) fenceLocked() {
	if p.fenced {
		return
	}
	p.fenced = true
	p.fatal = sarama.ErrProducerFenced
	p.endLocked(Aborted)
	p.c.eventLocked(Event{Kind: OpFenced, TxnID: p.txnID})
}

// endLocked ends the open transaction with state (Committed or Aborted),
// writing a control marker to every partition it touched.
func (p *producer) endLocked(state RecordState) {
	t := p.cur
	p.cur, p.abortable, p.ending = nil, nil, false
	if t == nil {
		return
	}
	t.state = state
	for pt := range t.touched {
		p.c.appendLocked(pt, &record{marker: true, txn: t})
	}
	p.c.notifyLocked()
}

// checkLocked returns why p cannot act now, if it cannot.
func (p *producer) checkLocked() error {
	switch {
	case p.closed:
		return sarama.ErrClosedClient
	case p.fatal != nil:
		return p.fatal
	}
	return nil
}

// SendMessage sends one message; see SendMessages.
func (p *producer) SendMessage(msg *sarama.ProducerMessage) (int32, int64, error) {
	if err := p.SendMessages([]*sarama.ProducerMessage{msg}); err != nil {
		var pes sarama.ProducerErrors
		if errors.As(err, &pes) && len(pes) == 1 {
			return -1, -1, pes[0].Err
		}
		return -1, -1, err
	}
	return msg.Partition, msg.Offset, nil
}

// SendMessages appends msgs to their partitions (msg.Partition, as the
// manual partitioner does), all or none, setting msg.Offset and
// msg.Timestamp. A transactional producer must be in a transaction. A
// failure returns sarama.ProducerErrors, one per message.
func (p *producer) SendMessages(msgs []*sarama.ProducerMessage) error {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fail := func(err error) error {
		pes := make(sarama.ProducerErrors, 0, len(msgs))
		for _, m := range msgs {
			pes = append(pes, &sarama.ProducerError{Msg: m, Err: err})
		}
		return pes
	}
	if err := p.checkLocked(); err != nil {
		return fail(err)
	}
	if p.txnID != "" && (p.cur == nil || p.abortable != nil) {
		return fail(sarama.ErrTransactionNotReady)
	}
	type encoded struct {
		pt         *partition
		key, value []byte
	}
	enc := make([]encoded, len(msgs))
	var topics []string
	for i, m := range msgs {
		pt, err := c.partLocked(m.Topic, m.Partition)
		if err != nil {
			return fail(sarama.ErrUnknownTopicOrPartition)
		}
		enc[i].pt = pt
		if enc[i].key, err = encode(m.Key); err == nil {
			enc[i].value, err = encode(m.Value)
		}
		if err != nil {
			return fail(fmt.Errorf("encode %s/%d: %w", m.Topic, m.Partition, err))
		}
		if !slices.Contains(topics, m.Topic) {
			topics = append(topics, m.Topic)
		}
	}
	for _, t := range topics {
		if err := c.faultLocked(Op{Kind: OpSend, TxnID: p.txnID, Topic: t}); err != nil {
			if p.cur != nil {
				p.abortable = err
			}
			return fail(err)
		}
	}
	now := time.Now()
	for i, m := range msgs {
		r := &record{key: enc[i].key, value: enc[i].value, headers: headerPtrs(m.Headers), timestamp: now, txn: p.cur}
		if p.cur != nil {
			p.cur.touched[enc[i].pt] = true
		}
		m.Offset = c.appendLocked(enc[i].pt, r)
		m.Timestamp = now
	}
	for _, t := range topics {
		c.eventLocked(Event{Kind: OpSend, TxnID: p.txnID, Topic: t})
	}
	c.notifyLocked()
	return nil
}

// encode returns a copy of what e encodes to: like a broker, the cluster
// keeps no reference to the producer's memory, which the engine reuses
// once a send has returned.
func encode(e sarama.Encoder) ([]byte, error) {
	if e == nil {
		return nil, nil
	}
	b, err := e.Encode()
	return bytes.Clone(b), err
}

// Close closes the producer. An open transaction stays open (and hides
// every later record of its partitions from read_committed readers) until
// a new producer with the same transactional id fences it.
func (p *producer) Close() error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	p.closed = true
	return nil
}

// TxnStatus returns the sarama transaction flags of the producer's state.
func (p *producer) TxnStatus() sarama.ProducerTxnStatusFlag {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	switch {
	case p.txnID == "":
		return sarama.ProducerTxnFlagReady
	case p.fatal != nil:
		return sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagFatalError
	case p.cur != nil && p.ending:
		return sarama.ProducerTxnFlagEndTransaction
	case p.cur != nil && p.abortable != nil:
		return sarama.ProducerTxnFlagInTransaction | sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagAbortableError
	case p.cur != nil:
		return sarama.ProducerTxnFlagInTransaction
	}
	return sarama.ProducerTxnFlagReady
}

// txnCallLocked checks a transactional call of kind and consults faults.
func (p *producer) txnCallLocked(kind string, group string) error {
	if p.txnID == "" {
		return sarama.ErrNonTransactedProducer
	}
	if err := p.checkLocked(); err != nil {
		p.c.eventLocked(Event{Kind: kind, TxnID: p.txnID, Err: err})
		return err
	}
	return p.c.faultLocked(Op{Kind: kind, TxnID: p.txnID, Group: group})
}

// BeginTxn opens a transaction.
func (p *producer) BeginTxn() error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if err := p.txnCallLocked(OpBegin, ""); err != nil {
		return err
	}
	if p.cur != nil {
		return sarama.ErrTransactionNotReady
	}
	p.cur = &txn{id: p.txnID, state: Open, touched: map[*partition]bool{}}
	p.c.eventLocked(Event{Kind: OpBegin, TxnID: p.txnID})
	return nil
}

// AddOffsetsToTxnWithGroupMetadata adds offsets to the open transaction;
// they become the group's committed offsets when it commits. The member
// and generation in meta are checked at commit (KIP-447).
func (p *producer) AddOffsetsToTxnWithGroupMetadata(offsets map[string][]*sarama.PartitionOffsetMetadata, meta *sarama.ConsumerGroupMetadata) error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if meta == nil {
		return fmt.Errorf("kafkatest: nil group metadata: %w", sarama.ErrInvalidGroupId)
	}
	if err := p.txnCallLocked(OpAddOffsets, meta.GroupID); err != nil {
		return err
	}
	if p.cur == nil {
		return sarama.ErrTransactionNotReady
	}
	cp := map[string][]*sarama.PartitionOffsetMetadata{}
	for t, ps := range offsets {
		for _, po := range ps {
			v := *po
			cp[t] = append(cp[t], &v)
		}
	}
	p.cur.offsets = append(p.cur.offsets, txnOffsets{offsets: cp, meta: *meta})
	p.c.eventLocked(Event{Kind: OpAddOffsets, TxnID: p.txnID, Group: meta.GroupID, Detail: offsetsDetail(cp)})
	return nil
}

// CommitTxn commits the open transaction: its records become visible and
// its offsets the groups' committed offsets, unless an offset commit's
// generation or member is stale (sarama.ErrIllegalGeneration,
// ErrUnknownMemberId), which leaves the transaction open and abortable.
func (p *producer) CommitTxn() error {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := p.txnCallLocked(OpCommit, ""); err != nil {
		if errors.Is(err, ErrCoordinatorLost) && p.cur != nil && p.fatal == nil {
			p.ending = true
		} else if isFencing(err) && p.fatal == nil {
			p.fenceLocked()
		} else if p.cur != nil && p.fatal == nil {
			p.abortable = err
		}
		return err
	}
	if p.cur == nil {
		return sarama.ErrTransactionNotReady
	}
	if p.abortable != nil {
		return p.abortable
	}
	for _, to := range p.cur.offsets {
		if err := c.checkGenerationLocked(to.meta); err != nil {
			p.abortable = err
			c.eventLocked(Event{Kind: OpCommit, TxnID: p.txnID, Group: to.meta.GroupID, Err: err})
			return err
		}
	}
	for _, to := range p.cur.offsets {
		c.commitOffsetsLocked(to.meta.GroupID, to.offsets)
	}
	p.endLocked(Committed)
	c.eventLocked(Event{Kind: OpCommit, TxnID: p.txnID})
	return nil
}

// AbortTxn aborts the open transaction: its records are never visible and
// its offsets are dropped.
func (p *producer) AbortTxn() error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if err := p.txnCallLocked(OpAbort, ""); err != nil {
		if errors.Is(err, ErrCoordinatorLost) && p.cur != nil && p.fatal == nil {
			p.ending = true
		}
		return err
	}
	if p.cur == nil {
		return sarama.ErrTransactionNotReady
	}
	p.endLocked(Aborted)
	p.c.eventLocked(Event{Kind: OpAbort, TxnID: p.txnID})
	return nil
}

func isFencing(err error) bool {
	return errors.Is(err, sarama.ErrProducerFenced) || errors.Is(err, sarama.ErrInvalidProducerEpoch)
}

// offsetsDetail renders offsets as "topic/p=o ..." sorted.
func offsetsDetail(offsets map[string][]*sarama.PartitionOffsetMetadata) string {
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(offsets)) {
		for _, po := range offsets[t] {
			parts = append(parts, fmt.Sprintf("%s/%d=%d", t, po.Partition, po.Offset))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
