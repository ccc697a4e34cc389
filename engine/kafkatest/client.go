package kafkatest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/engine"
)

var _ engine.Kafka = (*Cluster)(nil)

// NewClient returns a metadata client of the cluster.
func (c *Cluster) NewClient(cfg *sarama.Config) (sarama.Client, error) {
	return &client{c: c, cfg: cfg}, nil
}

// NewSyncProducer returns a producer; with cfg.Producer.Transaction.ID set
// it is transactional and fences the previous producer with that id.
func (c *Cluster) NewSyncProducer(cfg *sarama.Config) (sarama.SyncProducer, error) {
	p, err := c.newProducer(cfg)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// NewClusterAdmin returns an admin client of the cluster.
func (c *Cluster) NewClusterAdmin(*sarama.Config) (sarama.ClusterAdmin, error) {
	return &admin{c: c}, nil
}

// NewConsumerGroup returns a member of consumer group id; it joins on its
// first Consume.
func (c *Cluster) NewConsumerGroup(group string, cfg *sarama.Config) (sarama.ConsumerGroup, error) {
	cg, err := c.newConsumerGroup(group, cfg)
	if err != nil {
		return nil, err
	}
	return cg, nil
}

// NewLog returns the cluster's engine.Log; client is not used.
func (c *Cluster) NewLog(sarama.Client) engine.Log { return clusterLog{c: c} }

// client is a sarama.Client of the cluster. Only the methods below are
// modelled; the others panic (nil embedded interface).
type client struct {
	sarama.Client
	c      *Cluster
	cfg    *sarama.Config
	closed bool // guarded by c.mu
}

var _ engine.GroupHeartbeater = (*client)(nil)

// Heartbeat answers a group heartbeat as a coordinator does: an unknown
// (or evicted) member gets sarama.ErrUnknownMemberId, a generation other
// than the group's ErrIllegalGeneration, a member of a group that is
// rebalancing ErrRebalanceInProgress. An injected fault (OpHeartbeat) is
// returned as the request's error, as a lost connection would be.
func (cl *client) Heartbeat(req *sarama.HeartbeatRequest) (*sarama.HeartbeatResponse, error) {
	c := cl.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.faultLocked(Op{Kind: OpHeartbeat, Group: req.GroupId}); err != nil {
		return nil, err
	}
	resp := &sarama.HeartbeatResponse{Version: req.Version}
	g := c.groupLocked(req.GroupId)
	switch m := g.members[req.MemberId]; {
	case m == nil:
		resp.Err = sarama.ErrUnknownMemberId
	case req.GenerationId != g.generation:
		resp.Err = sarama.ErrIllegalGeneration
	case g.rebalancing:
		resp.Err = sarama.ErrRebalanceInProgress
	}
	return resp, nil
}

// RefreshCoordinator does nothing: the cluster is its own coordinator.
func (cl *client) RefreshCoordinator(string) error { return nil }

// Config returns the configuration the client was opened with.
func (cl *client) Config() *sarama.Config { return cl.cfg }

// Topics returns the topic names.
func (cl *client) Topics() ([]string, error) { return cl.c.Topics(), nil }

// Partitions returns topic's partition ids, or
// sarama.ErrUnknownTopicOrPartition.
func (cl *client) Partitions(topic string) ([]int32, error) {
	n := cl.c.Partitions(topic)
	if n == 0 {
		return nil, sarama.ErrUnknownTopicOrPartition
	}
	ps := make([]int32, n)
	for i := range ps {
		ps[i] = int32(i)
	}
	return ps, nil
}

// RefreshMetadata does nothing: metadata is always current. It fails with
// sarama.ErrClosedClient after Close.
func (cl *client) RefreshMetadata(...string) error {
	if cl.Closed() {
		return sarama.ErrClosedClient
	}
	return nil
}

// GetOffset returns the log start (sarama.OffsetOldest) or the high
// watermark (sarama.OffsetNewest) of topic/p; timestamps are not modelled.
func (cl *client) GetOffset(topic string, p int32, t int64) (int64, error) {
	c := cl.c
	c.mu.Lock()
	defer c.mu.Unlock()
	pt, err := c.partLocked(topic, p)
	if err != nil {
		return 0, err
	}
	switch t {
	case sarama.OffsetOldest:
		return pt.start, nil
	case sarama.OffsetNewest:
		return pt.end(), nil
	}
	return 0, fmt.Errorf("kafkatest: offsets by timestamp are not modelled: %w", sarama.ErrUnsupportedVersion)
}

// Close closes the client; a second Close fails with sarama.ErrClosedClient.
func (cl *client) Close() error {
	cl.c.mu.Lock()
	defer cl.c.mu.Unlock()
	if cl.closed {
		return sarama.ErrClosedClient
	}
	cl.closed = true
	return nil
}

// Closed reports whether Close was called.
func (cl *client) Closed() bool {
	cl.c.mu.Lock()
	defer cl.c.mu.Unlock()
	return cl.closed
}

// admin is a sarama.ClusterAdmin of the cluster. Only the methods below
// are modelled; the others panic (nil embedded interface).
type admin struct {
	sarama.ClusterAdmin
	c *Cluster
}

// CreateTopic creates topic; an existing one fails with a
// *sarama.TopicError of sarama.ErrTopicAlreadyExists.
func (a *admin) CreateTopic(topic string, d *sarama.TopicDetail, validateOnly bool) error {
	if validateOnly {
		return nil
	}
	return a.c.createTopic(topic, d)
}

// ListTopics returns every topic's details.
func (a *admin) ListTopics() (map[string]sarama.TopicDetail, error) {
	c := a.c
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]sarama.TopicDetail, len(c.topics))
	for name, t := range c.topics {
		d := t.detail
		d.NumPartitions = int32(len(t.parts))
		d.ConfigEntries = maps.Clone(t.detail.ConfigEntries)
		out[name] = d
	}
	return out, nil
}

// DescribeConsumerGroups describes groups: state, members with their
// metadata (subscription with user data) and assignment.
func (a *admin) DescribeConsumerGroups(groups []string) ([]*sarama.GroupDescription, error) {
	c := a.c
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*sarama.GroupDescription, 0, len(groups))
	for _, g := range groups {
		out = append(out, c.describeLocked(g))
	}
	return out, nil
}

// RemoveMemberFromConsumerGroup removes the static members with the given
// instance ids from group at once (LeaveGroup v3+, KIP-345): the others
// rebalance.
func (a *admin) RemoveMemberFromConsumerGroup(group string, instanceIDs []string) (*sarama.LeaveGroupResponse, error) {
	c := a.c
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groupLocked(group)
	for _, m := range g.members {
		if m.instanceID != nil && slices.Contains(instanceIDs, *m.instanceID) {
			c.removeMemberLocked(g, m, sarama.ErrUnknownMemberId)
		}
	}
	return &sarama.LeaveGroupResponse{}, nil
}

// Close does nothing.
func (a *admin) Close() error { return nil }

// clusterLog is the engine.Log of the cluster.
type clusterLog struct{ c *Cluster }

// Start returns the log start offset of topic/p.
func (l clusterLog) Start(_ context.Context, topic string, p int32) (int64, error) {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	pt, err := l.c.partLocked(topic, p)
	if err != nil {
		return 0, fmt.Errorf("start of %s/%d: %w", topic, p, err)
	}
	return pt.start, nil
}

// StableEnd waits until no transaction is open below topic/p's high
// watermark and returns it; it gives up with ctx's error.
func (l clusterLog) StableEnd(ctx context.Context, topic string, p int32) (int64, error) {
	c := l.c
	for {
		c.mu.Lock()
		pt, err := c.partLocked(topic, p)
		if err != nil {
			c.mu.Unlock()
			return 0, fmt.Errorf("stable end of %s/%d: %w", topic, p, err)
		}
		if hw := pt.end(); pt.stableEnd() >= hw {
			c.mu.Unlock()
			return hw, nil
		}
		ch := c.changed
		c.mu.Unlock()
		if !wait(ctx, ch, time.Second) {
			return 0, fmt.Errorf("stable end of %s/%d: %w", topic, p, ctx.Err())
		}
	}
}

// LastStable returns topic/p's last stable offset.
func (l clusterLog) LastStable(_ context.Context, topic string, p int32) (int64, error) {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	pt, err := l.c.partLocked(topic, p)
	if err != nil {
		return 0, fmt.Errorf("last stable offset of %s/%d: %w", topic, p, err)
	}
	return pt.stableEnd(), nil
}

// ReadCommitted calls fn for each committed data record of topic/p in
// [start, end), in order, stopping at fn's first error.
func (l clusterLog) ReadCommitted(ctx context.Context, topic string, p int32, start, end int64, fn func(engine.CommittedRecord) error) error {
	c := l.c
	c.mu.Lock()
	pt, err := c.partLocked(topic, p)
	if err != nil {
		c.mu.Unlock()
		return fmt.Errorf("read %s/%d: %w", topic, p, err)
	}
	var recs []engine.CommittedRecord
	for off := max(start, pt.start); off < min(end, pt.end()); off++ {
		r := pt.records[off-pt.start]
		if r.state() == Open {
			c.mu.Unlock()
			return fmt.Errorf("read %s/%d: offset %d is in an open transaction (wait for StableEnd first): %w", topic, p, off, sarama.ErrOffsetNotAvailable)
		}
		if r.visible() {
			recs = append(recs, engine.CommittedRecord{Offset: r.offset, Key: r.key, Value: r.value, Headers: r.headers})
		}
	}
	c.mu.Unlock()
	for _, r := range recs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}
