package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// pollInterval bounds how long a waiter sleeps between checks of state it
// is not notified of (time-based: rebalance timeouts).
const pollInterval = 20 * time.Millisecond

// consumerGroup is a sarama.ConsumerGroup on the cluster: one member of
// group, joining on each Consume.
type consumerGroup struct {
	sarama.ConsumerGroup // methods the engine does not call: not modelled
	c                    *Cluster
	group                string
	cfg                  *sarama.Config
	errors               chan error

	// guarded by c.mu:
	m      *member
	closed bool
}

var _ sarama.ConsumerGroup = (*consumerGroup)(nil)

func (c *Cluster) newConsumerGroup(group string, cfg *sarama.Config) (*consumerGroup, error) {
	if group == "" {
		return nil, sarama.ErrInvalidGroupId
	}
	if cfg == nil {
		cfg = sarama.NewConfig()
	}
	return &consumerGroup{c: c, group: group, cfg: cfg, errors: make(chan error, cfg.ChannelBufferSize)}, nil
}

// handleError reports err on Errors when the configuration asks for it,
// dropping it when nobody reads, as sarama does.
func (cg *consumerGroup) handleError(err error) {
	cg.c.mu.Lock()
	defer cg.c.mu.Unlock()
	cg.errorsLocked(err)
}

// Errors returns the channel of session errors (handler errors, refused
// offset commits) when Consumer.Return.Errors is set; Close closes it.
func (cg *consumerGroup) Errors() <-chan error { return cg.errors }

// Close leaves the group (the others rebalance) and closes Errors.
func (cg *consumerGroup) Close() error {
	c := cg.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if cg.closed {
		return nil
	}
	cg.closed = true
	if cg.m != nil {
		c.removeMemberLocked(c.groupLocked(cg.group), cg.m, sarama.ErrClosedConsumerGroup)
	}
	close(cg.errors)
	return nil
}

// Consume joins the group (every join rebalances it), waits until every
// member rejoined, and runs one session: Setup, ConsumeClaim of every
// claim concurrently, then, once ctx ends, a rebalance starts, or any
// ConsumeClaim returns, Cleanup. It returns sarama.ErrFencedInstancedId
// when another member with the same static instance id replaced this one.
func (cg *consumerGroup) Consume(ctx context.Context, topics []string, h sarama.ConsumerGroupHandler) error {
	if len(topics) == 0 {
		return fmt.Errorf("kafkatest: no topics provided")
	}
	c := cg.c
	c.mu.Lock()
	if cg.closed {
		c.mu.Unlock()
		return sarama.ErrClosedConsumerGroup
	}
	if err := c.faultLocked(Op{Kind: OpJoin, Group: cg.group}); err != nil {
		c.mu.Unlock()
		return err
	}
	g := c.groupLocked(cg.group)
	if cg.m != nil && errors.Is(cg.m.gone, sarama.ErrFencedInstancedId) {
		c.mu.Unlock()
		return sarama.ErrFencedInstancedId
	}
	if cg.m == nil || g.members[cg.m.id] != cg.m {
		cg.m = c.addMemberLocked(g, cg.cfg)
	}
	m := cg.m
	m.topics, m.waiting, m.running = topics, true, false
	c.eventLocked(Event{Kind: OpJoin, Group: cg.group, Detail: m.id})
	c.startRebalanceLocked(g)
	c.tryCompleteLocked(g)
	for m.waiting {
		ch := c.changed
		c.mu.Unlock()
		live := wait(ctx, ch, pollInterval)
		c.mu.Lock()
		if !live {
			if m.waiting {
				c.removeMemberLocked(g, m, ctx.Err())
			}
			c.mu.Unlock()
			return ctx.Err()
		}
		c.evictLaggardsLocked(g)
	}
	if m.gone != nil {
		err := m.gone
		c.mu.Unlock()
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	if g.rebalancing {
		cancel() // a rebalance began before this session started
	}
	s := &session{cg: cg, ctx: sctx, cancel: cancel, member: m.id, gen: m.gen, claims: map[string][]int32{}, marked: map[string]map[int32]int64{}}
	var claims []*claim
	for t, ps := range m.assign {
		s.claims[t] = append([]int32(nil), ps...)
		for _, p := range ps {
			cl, err := c.newClaimLocked(g, cg.cfg, t, p)
			if err != nil {
				cg.errorsLocked(err)
				continue
			}
			claims = append(claims, cl)
		}
	}
	c.mu.Unlock()
	err := s.run(h, claims)
	c.mu.Lock()
	m.running, m.cancel = false, nil
	c.mu.Unlock()
	cancel()
	return err
}

// errorsLocked is handleError for a caller holding c.mu.
func (cg *consumerGroup) errorsLocked(err error) {
	if cg.cfg.Consumer.Return.Errors && !cg.closed {
		select {
		case cg.errors <- err:
		default:
		}
	}
}

// session is a sarama.ConsumerGroupSession of the fake.
type session struct {
	sarama.ConsumerGroupSession // methods the engine does not call: not modelled
	cg                          *consumerGroup
	ctx                         context.Context
	cancel                      context.CancelFunc
	member                      string
	gen                         int32
	claims                      map[string][]int32

	mu     sync.Mutex
	marked map[string]map[int32]int64
}

var _ sarama.ConsumerGroupSession = (*session)(nil)

// run runs the handler over claims until the session ends.
func (s *session) run(h sarama.ConsumerGroupHandler, claims []*claim) error {
	if err := h.Setup(s); err != nil {
		s.cancel()
		s.cg.handleError(err)
		return err
	}
	var wg sync.WaitGroup
	for _, cl := range claims {
		wg.Add(2)
		go func() {
			defer wg.Done()
			s.cg.c.feed(s.ctx, cl)
		}()
		go func() {
			defer wg.Done()
			defer s.cancel() // a handler returning ends the session, as in sarama
			if err := h.ConsumeClaim(s, cl); err != nil {
				s.cg.handleError(err)
			}
		}()
	}
	<-s.ctx.Done()
	wg.Wait()
	err := h.Cleanup(s)
	if err != nil {
		s.cg.handleError(err)
	}
	if s.cg.cfg.Consumer.Offsets.AutoCommit.Enable {
		s.Commit()
	}
	return err
}

// Claims returns the session's assignment by topic.
func (s *session) Claims() map[string][]int32 { return s.claims }

// MemberID returns this member's id.
func (s *session) MemberID() string { return s.member }

// GenerationID returns the session's generation.
func (s *session) GenerationID() int32 { return s.gen }

// Context ends when the session ends.
func (s *session) Context() context.Context { return s.ctx }

// MarkOffset marks offset (the next to consume) of topic/p for the next
// Commit, unless a higher one is marked already.
func (s *session) MarkOffset(topic string, p int32, offset int64, _ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.marked[topic] == nil {
		s.marked[topic] = map[int32]int64{}
	}
	if cur, ok := s.marked[topic][p]; !ok || offset > cur {
		s.marked[topic][p] = offset
	}
}

// MarkMessage marks msg as consumed (its offset + 1).
func (s *session) MarkMessage(msg *sarama.ConsumerMessage, metadata string) {
	s.MarkOffset(msg.Topic, msg.Partition, msg.Offset+1, metadata)
}

// Commit commits the marked offsets (a non-transactional offset commit
// carrying the session's member and generation). A commit the group
// refuses (stale generation, unknown member) is reported on Errors and
// changes nothing, as sarama does.
func (s *session) Commit() {
	s.mu.Lock()
	offsets := map[string][]*sarama.PartitionOffsetMetadata{}
	for t, ps := range s.marked {
		for p, o := range ps {
			offsets[t] = append(offsets[t], &sarama.PartitionOffsetMetadata{Partition: p, Offset: o})
		}
	}
	s.mu.Unlock()
	if len(offsets) == 0 {
		return
	}
	c := s.cg.c
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.faultLocked(Op{Kind: OpOffsetCommit, Group: s.cg.group})
	if err == nil {
		err = c.checkGenerationLocked(sarama.ConsumerGroupMetadata{GroupID: s.cg.group, GenerationID: s.gen, MemberID: s.member})
	}
	if err != nil {
		c.eventLocked(Event{Kind: OpOffsetCommit, Group: s.cg.group, Err: err})
		s.cg.errorsLocked(fmt.Errorf("kafkatest: commit offsets of %s: %w", s.cg.group, err))
		return
	}
	c.commitOffsetsLocked(s.cg.group, offsets)
}

// claim is a sarama.ConsumerGroupClaim of the fake: a read_committed
// reader of one partition from its initial offset.
type claim struct {
	c       *Cluster
	topic   string
	p       int32
	initial int64
	msgs    chan *sarama.ConsumerMessage
}

var _ sarama.ConsumerGroupClaim = (*claim)(nil)

// newClaimLocked starts a claim at g's committed offset of topic/p, or at
// the configured initial offset (oldest or newest) when there is none.
func (c *Cluster) newClaimLocked(g *group, cfg *sarama.Config, topic string, p int32) (*claim, error) {
	pt, err := c.partLocked(topic, p)
	if err != nil {
		return nil, err
	}
	off, ok := g.offsets[topic][p]
	if !ok {
		off = pt.start
		if cfg.Consumer.Offsets.Initial == sarama.OffsetNewest {
			off = pt.end()
		}
	}
	return &claim{c: c, topic: topic, p: p, initial: off, msgs: make(chan *sarama.ConsumerMessage, max(cfg.ChannelBufferSize, 1))}, nil
}

// Topic returns the claimed topic.
func (cl *claim) Topic() string { return cl.topic }

// Partition returns the claimed partition.
func (cl *claim) Partition() int32 { return cl.p }

// InitialOffset returns the offset the claim started reading at.
func (cl *claim) InitialOffset() int64 { return cl.initial }

// HighWaterMarkOffset returns the partition's current high watermark.
func (cl *claim) HighWaterMarkOffset() int64 {
	hw, _ := cl.c.HighWatermark(cl.topic, cl.p)
	return hw
}

// Messages delivers the partition's committed records below the last
// stable offset, in order; it is closed when the session ends.
func (cl *claim) Messages() <-chan *sarama.ConsumerMessage { return cl.msgs }

// feed sends cl's records to its channel until ctx ends, then closes it.
func (c *Cluster) feed(ctx context.Context, cl *claim) {
	defer close(cl.msgs)
	next := cl.initial
	for {
		c.mu.Lock()
		var batch []*sarama.ConsumerMessage
		if pt, err := c.partLocked(cl.topic, cl.p); err == nil {
			next = max(next, pt.start)
			lso := pt.stableEnd()
			for ; next < lso; next++ {
				r := pt.records[next-pt.start]
				if r.visible() {
					batch = append(batch, &sarama.ConsumerMessage{Topic: cl.topic, Partition: cl.p, Offset: r.offset,
						Key: r.key, Value: r.value, Headers: r.headers, Timestamp: r.timestamp})
				}
			}
		}
		ch := c.changed
		c.mu.Unlock()
		for _, m := range batch {
			select {
			case cl.msgs <- m:
			case <-ctx.Done():
				return
			}
		}
		if !wait(ctx, ch, time.Hour) {
			return
		}
	}
}
