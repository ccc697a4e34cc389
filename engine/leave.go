package engine

import (
	"context"
	"slices"

	"github.com/IBM/sarama"
)

// Leaving: a stopping static member (Config.InstanceID) stays in the group
// until its session times out, and nobody runs its partitions meanwhile.
// So one whose every active has a standby elsewhere, or whose store is
// shared (Redis), leaves (LeaveGroup by instance id, KIP-345) and its
// actives move to their standbys at once. A dynamic member leaves anyway.

// leave removes this static member from the group if its actives are
// covered (see above). It runs once the group session has ended.
func (e *Engine) leave() {
	admin := e.route.adminClient()
	if e.cfg.InstanceID == "" || admin == nil {
		return
	}
	actives, _ := e.lastSession()
	if e.localStore {
		m, err := e.route.describe()
		if err != nil {
			e.log.Info("stopping without leaving the group: membership unknown", "err", err)
			return
		}
		for _, p := range actives {
			if !slices.ContainsFunc(m.Replicas[p], func(a string) bool { return a != e.route.self }) {
				e.log.Info("stopping without leaving the group: a partition has no standby elsewhere; it waits for this instance",
					"partition", p, "session_timeout", e.cfg.SessionTimeout)
				return
			}
		}
	}
	if err := e.removeMembership(admin); err != nil {
		e.log.Warn("could not leave the group; its partitions move after the session timeout", "err", err, "session_timeout", e.cfg.SessionTimeout)
		return
	}
	e.log.Info("left the group: its partitions move to their standbys now", "actives", actives)
}

// Returning without the state: a static member back within the session
// timeout gets its old assignment without a rebalance (KIP-345), so one
// whose volume was lost would replay the whole changelog while others
// hold caught-up standbys. If its store is more than the acceptable lag
// behind on a partition of its old assignment, it removes its old
// membership and joins as a new member, so those go to their standbys.

// dropStaleMembership removes this instance's old static membership when
// it returns without its state (see above).
func (e *Engine) dropStaleMembership(ctx context.Context) {
	admin := e.route.adminClient()
	if e.cfg.InstanceID == "" || admin == nil || !e.localStore || e.cfg.StandbyReplicas == 0 {
		return
	}
	old, _, err := e.lastAssignment(admin)
	if err != nil {
		return
	}
	for _, p := range old {
		end, err := e.clog.LastStable(ctx, e.topics.Changelog, p)
		if err != nil {
			return
		}
		cp, ok := e.copies.get(p)
		if ok && end-cp <= e.cfg.AcceptableLag {
			continue
		}
		if err := e.removeMembership(admin); err != nil {
			e.log.Warn("returning without the state of a partition, but could not leave the old membership; restoring it", "partition", p, "err", err)
			return
		}
		e.log.Info("returned without the state of a partition it ran: left its old membership, so that the partition goes to a caught-up standby",
			"partition", p, "checkpoint", cp, "has_checkpoint", ok, "changelog_end", end)
		return
	}
}

// removeMembership removes this instance's static membership from the
// group (LeaveGroup by instance id, KIP-345).
func (e *Engine) removeMembership(admin sarama.ClusterAdmin) error {
	resp, err := admin.RemoveMemberFromConsumerGroup(e.cfg.ApplicationID, []string{e.cfg.InstanceID})
	if err == nil && resp != nil && resp.Err != 0 {
		err = resp.Err
	}
	return err
}
