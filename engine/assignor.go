package engine

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/IBM/sarama"
)

// AssignorName is the protocol name of the engine's assignor in the
// consumer group. Members also offer sarama's "range" strategy, so a
// group that still has members of a build without this assignor (a
// rolling upgrade) agrees on range and runs as those builds did.
const AssignorName = "keepstate"

// assignor is the engine's sarama BalanceStrategy (see assign.go): members
// report their state in their subscription, the leader plans actives,
// standbys and warm-ups, and each member learns its standbys and
// warm-ups from its assignment's user data. Safe for concurrent use.
type assignor struct {
	e *Engine

	mu sync.Mutex
	// plans is the leader's last plan, by member id, for AssignmentData.
	plans map[string]*memberPlan
	// mine is this member's last assignment (OnAssignment).
	mine replicaAssignment
}

// replicaAssignment is the replica part of one member's assignment.
type replicaAssignment struct {
	gen               int32
	standbys, warmups []int32
}

var _ sarama.SubscriptionUserDataBalanceStrategy = (*assignor)(nil)
var _ sarama.OnAssignmentBalanceStrategy = (*assignor)(nil)

func (a *assignor) Name() string { return AssignorName }

// SubscriptionUserData reports this member's state to the leader.
func (a *assignor) SubscriptionUserData([]string) ([]byte, error) {
	return a.e.memberState().encode(), nil
}

// Plan is run by the group's leader: aggregate partitions by the rules of
// assign.go, input partitions spread evenly and sticky (planInputs).
func (a *assignor) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	e := a.e
	ids := slices.Sorted(maps.Keys(members))
	states := make(map[string]memberState, len(members))
	for id, m := range members {
		s, err := decodeMemberState(m.UserData)
		if err != nil {
			e.log.Warn("member sent unreadable assignor user data; it is planned as holding no state", "member", id, "err", err)
		}
		states[id] = s
	}
	plan := sarama.BalanceStrategyPlan{}
	repart := int32(len(topics[e.topics.Repartition]))
	e.fenceDeparted(states, repart, int32(len(topics[e.topics.Input])))
	plans := planPartitions(ids, states, repart, e.cfg.StandbyReplicas, e.cfg.AcceptableLag)
	for id, mp := range plans {
		if len(mp.Actives) > 0 {
			plan.Add(id, e.topics.Repartition, mp.Actives...)
		}
	}
	for id, ps := range planInputs(ids, states, int32(len(topics[e.topics.Input]))) {
		plan.Add(id, e.topics.Input, ps...)
	}
	for _, id := range ids {
		if plan[id] == nil {
			// No partition to consume, yet maybe standbys: sarama sends a
			// member missing from the plan an assignment without user data.
			plan[id] = map[string][]int32{}
		}
	}
	a.mu.Lock()
	a.plans = plans
	a.mu.Unlock()
	e.log.Info("assignment planned", "members", len(ids), "plan", planSummary(plans))
	return plan, nil
}

// AssignmentData returns the member's standbys and warm-ups of the plan
// just made.
func (a *assignor) AssignmentData(memberID string, _ map[string][]int32, _ int32) ([]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if mp := a.plans[memberID]; mp != nil {
		return mp.encode(), nil
	}
	return nil, nil
}

// OnAssignment keeps this member's replicas of generation gen for Setup.
func (a *assignor) OnAssignment(asg *sarama.ConsumerGroupMemberAssignment, gen int32) {
	ra := replicaAssignment{gen: gen}
	if asg != nil {
		ra.standbys, ra.warmups, _ = decodeReplicas(asg.UserData)
	}
	a.mu.Lock()
	a.mine = ra
	a.mu.Unlock()
}

// replicas returns the standbys and warm-ups assigned to this member in
// generation gen (none when gen's assignment came from another strategy).
func (a *assignor) replicas(gen int32) (standbys, warmups []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mine.gen != gen {
		return nil, nil
	}
	return a.mine.standbys, a.mine.warmups
}

// planSummary renders a plan for the log: member → actives/standbys/warm-ups.
func planSummary(plans map[string]*memberPlan) map[string]string {
	out := make(map[string]string, len(plans))
	for id, mp := range plans {
		out[id] = fmt.Sprintf("actives=%v standbys=%v warmups=%v", mp.Actives, mp.Standbys, mp.Warmups)
	}
	return out
}

// rangeStrategy is sarama's range strategy whose subscription carries the
// bare advertised address, as older builds wrote it: what they read
// (owners.go) when the group agrees on range.
type rangeStrategy struct {
	sarama.BalanceStrategy
	addr string
}

var _ sarama.SubscriptionUserDataBalanceStrategy = rangeStrategy{}

func (r rangeStrategy) SubscriptionUserData([]string) ([]byte, error) { return []byte(r.addr), nil }
