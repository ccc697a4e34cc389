package kafkatest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// member is one member of a consumer group. Its fields are guarded by the
// cluster's lock.
type member struct {
	id         string
	instanceID *string
	clientID   string
	userData   []byte
	topics     []string
	// waiting is set while the member waits in Consume for the rebalance
	// to complete; running while it is in a session (from the end of the
	// rebalance that assigned it until Consume returns).
	waiting, running bool
	// cancel ends the running session (nil before it started).
	cancel context.CancelFunc
	gen    int32
	assign map[string][]int32
	// gone is why the member is no longer in the group (evicted, fenced by
	// another static member, left): its later calls fail with it.
	gone error
}

// group is a consumer group's coordinator state.
type group struct {
	id          string
	generation  int32
	members     map[string]*member
	rebalancing bool
	since       time.Time // start of the rebalance in progress
	offsets     map[string]map[int32]int64
}

func (c *Cluster) groupLocked(id string) *group {
	g := c.groups[id]
	if g == nil {
		g = &group{id: id, members: map[string]*member{}, offsets: map[string]map[int32]int64{}}
		c.groups[id] = g
	}
	return g
}

// addMemberLocked adds a new member to g; a static member replaces (and
// fences) the live member with the same instance id.
func (c *Cluster) addMemberLocked(g *group, cfg *sarama.Config) *member {
	c.nextMember++
	m := &member{id: fmt.Sprintf("%s-%04d", cfg.ClientID, c.nextMember), clientID: cfg.ClientID,
		userData: cfg.Consumer.Group.Member.UserData}
	if id := cfg.Consumer.Group.InstanceId; id != "" {
		m.instanceID = &id
		for _, o := range g.members {
			if o.instanceID != nil && *o.instanceID == id {
				c.removeMemberLocked(g, o, sarama.ErrFencedInstancedId)
			}
		}
	}
	g.members[m.id] = m
	return m
}

// removeMemberLocked takes m out of g for reason and rebalances the others.
func (c *Cluster) removeMemberLocked(g *group, m *member, reason error) {
	if g.members[m.id] != m {
		return
	}
	delete(g.members, m.id)
	m.gone = reason
	m.waiting = false
	if m.cancel != nil {
		m.cancel()
	}
	c.startRebalanceLocked(g)
	c.tryCompleteLocked(g)
}

// startRebalanceLocked begins a rebalance of g: every running session is
// told to end (eager protocol); members rejoin by calling Consume again.
func (c *Cluster) startRebalanceLocked(g *group) {
	if !g.rebalancing {
		g.rebalancing = true
		g.since = time.Now()
	}
	for _, m := range g.members {
		if m.running && m.cancel != nil {
			m.cancel()
		}
	}
	c.notifyLocked()
}

// tryCompleteLocked completes g's rebalance once every member waits in
// Consume: the generation is incremented and partitions are assigned.
func (c *Cluster) tryCompleteLocked(g *group) {
	if !g.rebalancing {
		return
	}
	for _, m := range g.members {
		if !m.waiting {
			return
		}
	}
	g.rebalancing = false
	if len(g.members) == 0 {
		return
	}
	g.generation++
	assign := c.assignLocked(g)
	for _, m := range g.members {
		m.waiting, m.running, m.cancel = false, true, nil
		m.gen, m.assign = g.generation, assign[m.id]
	}
	c.notifyLocked()
}

// evictLaggardsLocked removes the members that did not rejoin within the
// rebalance timeout (a member stuck in a session, or gone silent).
func (c *Cluster) evictLaggardsLocked(g *group) {
	if !g.rebalancing || time.Since(g.since) < c.RebalanceTimeout {
		return
	}
	for _, m := range g.members {
		if !m.waiting {
			c.removeMemberLocked(g, m, sarama.ErrUnknownMemberId)
		}
	}
	c.tryCompleteLocked(g)
}

// assignLocked assigns each subscribed topic's partitions range-style:
// members subscribed to the topic sorted by id, each a contiguous range,
// the first ones one more when the count does not divide.
func (c *Cluster) assignLocked(g *group) map[string]map[string][]int32 {
	out := map[string]map[string][]int32{}
	topics := map[string][]string{}
	for _, m := range g.members {
		out[m.id] = map[string][]int32{}
		for _, t := range m.topics {
			topics[t] = append(topics[t], m.id)
		}
	}
	for t, ids := range topics {
		tp, ok := c.topics[t]
		if !ok {
			continue
		}
		slices.Sort(ids)
		n, k := len(tp.parts), len(ids)
		next := 0
		for i, id := range ids {
			size := n / k
			if i < n%k {
				size++
			}
			for p := next; p < next+size; p++ {
				out[id][t] = append(out[id][t], int32(p))
			}
			next += size
		}
	}
	return out
}

// checkGenerationLocked checks the member and generation of a
// transactional offset commit (KIP-447); an undefined generation skips it.
func (c *Cluster) checkGenerationLocked(meta sarama.ConsumerGroupMetadata) error {
	if meta.GenerationID == sarama.GroupGenerationUndefined {
		return nil
	}
	g := c.groupLocked(meta.GroupID)
	if _, ok := g.members[meta.MemberID]; !ok {
		return sarama.ErrUnknownMemberId
	}
	if meta.GenerationID != g.generation {
		return sarama.ErrIllegalGeneration
	}
	return nil
}

// commitOffsetsLocked makes offsets group's committed offsets.
func (c *Cluster) commitOffsetsLocked(group string, offsets map[string][]*sarama.PartitionOffsetMetadata) {
	g := c.groupLocked(group)
	for t, ps := range offsets {
		if g.offsets[t] == nil {
			g.offsets[t] = map[int32]int64{}
		}
		for _, po := range ps {
			g.offsets[t][po.Partition] = po.Offset
		}
		c.eventLocked(Event{Kind: OpOffsetCommit, Group: group, Topic: t, Detail: offsetsDetail(map[string][]*sarama.PartitionOffsetMetadata{t: ps})})
	}
	c.notifyLocked()
}

// CommittedOffset returns group's committed offset of topic/p (the next
// offset to consume); ok is false when none was committed.
func (c *Cluster) CommittedOffset(group, topic string, p int32) (offset int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, found := c.groups[group]
	if !found {
		return 0, false
	}
	offset, ok = g.offsets[topic][p]
	return offset, ok
}

// describeLocked describes group as DescribeGroups answers: member
// metadata (consumer protocol subscription v0 with the member's user data)
// and assignment (v0), encoded by kmsg as sarama decodes them.
func (c *Cluster) describeLocked(id string) *sarama.GroupDescription {
	g, ok := c.groups[id]
	d := &sarama.GroupDescription{GroupId: id, State: "Dead", Members: map[string]*sarama.GroupMemberDescription{}}
	if !ok {
		return d
	}
	d.ProtocolType, d.Protocol = "consumer", "range"
	switch {
	case len(g.members) == 0:
		d.State = "Empty"
	case g.rebalancing:
		d.State = "PreparingRebalance"
	default:
		d.State = "Stable"
	}
	for _, m := range g.members {
		meta := kmsg.ConsumerMemberMetadata{Topics: m.topics, UserData: m.userData}
		md := &sarama.GroupMemberDescription{MemberId: m.id, GroupInstanceId: m.instanceID, ClientId: m.clientID,
			ClientHost: "/127.0.0.1", MemberMetadata: meta.AppendTo(nil)}
		if m.running && !g.rebalancing {
			var assign kmsg.ConsumerMemberAssignment
			for _, t := range slices.Sorted(maps.Keys(m.assign)) {
				assign.Topics = append(assign.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t, Partitions: m.assign[t]})
			}
			md.MemberAssignment = assign.AppendTo(nil)
		}
		d.Members[m.id] = md
	}
	return d
}
