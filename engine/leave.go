package engine

import (
	"slices"
)

// Leaving: a static member (Config.InstanceID) that stops stays in the
// group until its session times out, so that an instance restarting
// within the session timeout finds its partitions, and its state, where
// it left them. Meanwhile nobody runs those partitions. When another
// member can take each of them without a long replay, waiting is only
// darkness: so a stopping member whose every active has a standby on
// another member, or whose store every member shares (Redis), removes
// itself from the group (LeaveGroup by instance id, KIP-345), and the
// group moves its actives to their standbys at once. A member with an
// active nobody else holds keeps the static behaviour and comes back to
// its own state. A dynamic member leaves on close anyway (sarama).

// leave removes this static member from the group if its actives are
// covered (see above). It runs once the group session has ended.
func (e *Engine) leave() {
	admin := e.route.adminClient()
	if e.cfg.InstanceID == "" || admin == nil {
		return
	}
	actives := e.lastActives()
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
	resp, err := admin.RemoveMemberFromConsumerGroup(e.cfg.ApplicationID, []string{e.cfg.InstanceID})
	if err == nil && resp != nil && resp.Err != 0 {
		err = resp.Err
	}
	if err != nil {
		e.log.Warn("could not leave the group; its partitions move after the session timeout", "err", err, "session_timeout", e.cfg.SessionTimeout)
		return
	}
	e.log.Info("left the group: its partitions move to their standbys now", "actives", actives)
}
