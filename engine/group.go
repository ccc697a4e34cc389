package engine

import (
	"github.com/IBM/sarama"
)

// groupHandler dispatches the claims of a consumer group session: input
// partitions to the rekey loop, repartition partitions to aggregate tasks.
type groupHandler struct{ e *Engine }

// Setup marks the session's repartition partitions as RESTORING and
// starts the session's read lease keeper (lease.go).
func (h *groupHandler) Setup(s sarama.ConsumerGroupSession) error {
	e := h.e
	e.setups.Add(1)
	ps := s.Claims()[e.topics.Repartition]
	for _, p := range ps {
		e.route.parts.set(p, Restoring)
	}
	e.c.assigned.Store(int64(len(ps)))
	e.c.running.Store(0)
	e.route.parts.setJoined()
	e.route.owners.invalidate()
	e.parked.release(ps, s.GenerationID())
	e.parkedRekey.release(s.Claims()[e.topics.Input], s.GenerationID())
	e.onAssigned(ps, s.GenerationID())
	was := e.startSession(s.GenerationID(), ps, s.Claims()[e.topics.Input])
	standbys, warmups := e.asg.replicas(s.GenerationID())
	e.setReplicas(was, ps, standbys, warmups)
	go e.keepLease(s, e.client)
	e.route.refresh()
	e.log.Info("partitions assigned", "generation", s.GenerationID(), "member", s.MemberID(),
		"aggregate", ps, "standby", standbys, "warmup", warmups, "input", s.Claims()[e.topics.Input])
	return nil
}

// Cleanup commits the offsets marked last (the rekey loop commits only
// every commit interval; tasks flushed and committed on their way out) and
// forgets the session's partitions.
func (h *groupHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	e := h.e
	s.Commit()
	e.route.parts.revoked(s.GenerationID())
	for _, p := range s.Claims()[e.topics.Repartition] {
		e.route.parts.remove(p)
	}
	e.c.assigned.Store(0)
	e.c.running.Store(0)
	e.route.owners.invalidate()
	e.scheduleStaleDrops(s.Claims()[e.topics.Repartition])
	return nil
}

// ConsumeClaim runs the stage of one claimed partition until the session
// ends. A fatal error restarts the session, so the partition is restored
// and reprocessed from its last commit.
func (h *groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	e := h.e
	var err error
	if c.Topic() == e.topics.Input {
		err = e.rekey(s, c)
	} else {
		err = newTask(e, s, c).run()
	}
	if err != nil && s.Context().Err() == nil {
		e.restartSession("partition "+c.Topic()+"/"+itoa(int64(c.Partition())), err)
	}
	return err
}
