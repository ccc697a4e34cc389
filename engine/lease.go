package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// The read lease fences reads as the broker (KIP-447) and the store's
// claim epochs fence writes: an instance answers a partition as its owner
// only while its group membership is proven recent. The coordinator
// expels a member no sooner than the session timeout after its last
// heartbeat (or the rebalance timeout after a rebalance began), so a
// heartbeat sent at t and answered without error proves nobody else gets
// this instance's partitions before t + min(session, rebalance timeout),
// less a margin for clock-rate drift.
//
// The lease is read on a monotonic clock, which runs on while the process
// is stopped: an instance woken from a long SIGSTOP finds its lease lapsed
// at its first instruction, before any goroutine learns that the group
// went on without it. sarama's heartbeats do not report their outcome, so
// the engine sends its own every heartbeat interval (keepLease).

// leaseEpoch anchors the lease's monotonic clock.
var leaseEpoch = time.Now()

// monoNow is the time since leaseEpoch on the monotonic clock.
func monoNow() time.Duration { return time.Since(leaseEpoch) }

// leaseMargin is what the lease keeps back from the span a heartbeat
// proves: a tenth of it, at least 100 ms.
func leaseMargin(span time.Duration) time.Duration { return max(span/10, 100*time.Millisecond) }

// readLease is how long this instance's group membership is proven. Reads
// are one atomic load; renewals and revocations come from the current
// session's keeper only (an ended one may still have a heartbeat in
// flight). Safe for concurrent use.
type readLease struct {
	until atomic.Int64 // monoNow() value the lease runs to; 0: never proven
	// proven is the furthest until ever proven (cut to a revocation): the
	// last moment this instance's copies were known to be current.
	proven atomic.Int64

	mu      sync.Mutex
	session uint64 // the current keeper's token
}

// valid reports whether the lease runs at now (a monoNow value).
func (l *readLease) valid(now time.Duration) bool { return int64(now) < l.until.Load() }

// begin starts a new keeper and returns its token. A running lease carries
// over: the new assignment came from a rebalance this member took part in,
// and another cannot end without it before the lease runs out.
func (l *readLease) begin() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.session++
	return l.session
}

// renew extends the lease to sent+span-margin, for the keeper holding
// token, whose heartbeat was sent at sent (a monoNow value). It returns
// where the lease ran to before (0: never proven, or revoked), and false
// when token is not the current keeper's (nothing changed).
func (l *readLease) renew(token uint64, sent, span time.Duration) (prev time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if token != l.session {
		return 0, false
	}
	prev = time.Duration(l.until.Load())
	if until := sent + span - leaseMargin(span); until > prev {
		l.until.Store(int64(until))
		l.proven.Store(max(l.proven.Load(), int64(until)))
	}
	return prev, true
}

// revoke ends the lease at once: the coordinator said this member is not
// in the current generation any more.
func (l *readLease) revoke(token uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if token == l.session {
		l.until.Store(0)
		l.proven.Store(min(l.proven.Load(), int64(monoNow())))
	}
}

// ErrLeaseLapsed marks a query this instance cannot answer as the owner
// of the key's partition because its group membership is not proven
// recent (paused, cut off from the coordinator, or rejoining). It wraps
// ErrUnavailable: ask again, or ask the partition's new owner.
var ErrLeaseLapsed = fmt.Errorf("group membership of this instance unconfirmed (read lease lapsed): %w", ErrUnavailable)

// errLeaseLapsed wraps ErrLeaseLapsed with the partition and how long ago
// the lease ran out.
func (r *Router) errLeaseLapsed(p int32) error {
	until := r.lease.until.Load()
	if until == 0 {
		return fmt.Errorf("partition %d: no heartbeat of the current generation answered yet: %w", p, ErrLeaseLapsed)
	}
	ago := (monoNow() - time.Duration(until)).Round(time.Millisecond)
	return fmt.Errorf("partition %d: no heartbeat answered, the lease ran out %v ago: %w", p, ago, ErrLeaseLapsed)
}

// heartbeat sends one heartbeat for member in generation gen and returns
// the coordinator's error code as an error (nil: the member is in gen).
func (e *Engine) heartbeat(client sarama.Client, member string, gen int32) error {
	req := &sarama.HeartbeatRequest{Version: 4, GroupId: e.cfg.ApplicationID, MemberId: member, GenerationId: gen}
	if id := e.cfg.InstanceID; id != "" {
		req.GroupInstanceId = &id
	}
	b, err := client.Coordinator(e.cfg.ApplicationID)
	if err != nil {
		return err
	}
	resp, err := b.Heartbeat(req)
	if err != nil {
		// A sarama connection whose read failed fails every later request
		// until closed, and the coordinator may have moved: close it and
		// look the coordinator up again.
		_ = b.Close()
		_ = client.RefreshCoordinator(e.cfg.ApplicationID)
		return err
	}
	if resp.Err == sarama.ErrNoError {
		return nil
	}
	return resp.Err
}

// keepLease renews the read lease for session s until s ends: a heartbeat
// every heartbeat interval, each answered without error extending the
// lease. An answer saying the member is not in the generation revokes it
// until an answer says it is again.
func (e *Engine) keepLease(s sarama.ConsumerGroupSession, client sarama.Client) {
	l := &e.route.lease
	token := l.begin()
	span := e.leaseSpan()
	every := e.heartbeatInterval()
	t := time.NewTicker(every)
	defer t.Stop()
	ctx := s.Context()
	revoked := false
	for {
		sent := monoNow()
		err := e.heartbeat(client, s.MemberID(), s.GenerationID())
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			revoked = false
			prev, ok := l.renew(token, sent, span)
			switch now := monoNow(); {
			case !ok:
			case prev == 0:
				e.log.Info("read lease proven: answering its partitions as owner", "generation", s.GenerationID())
			case prev <= now:
				e.c.leaseLapses.Add(1)
				e.log.Warn("read lease had run out: no heartbeat answered in time; answering its partitions as owner again",
					"generation", s.GenerationID(), "lapsed_for", (now - prev).Round(time.Millisecond))
			}
		case errors.Is(err, sarama.ErrUnknownMemberId), errors.Is(err, sarama.ErrIllegalGeneration), errors.Is(err, sarama.ErrFencedInstancedId):
			// Revoked, but the keeper goes on: a paused coordinator that lost
			// the group to another broker answers so from stale state. If
			// the group went on, the session ends; else a later answer
			// renews the lease.
			if !revoked {
				revoked = true
				e.c.leaseLapses.Add(1)
				e.log.Warn("read lease revoked: the coordinator does not know this member in this generation", "generation", s.GenerationID(), "err", err)
			}
			l.revoke(token)
			_ = client.RefreshCoordinator(e.cfg.ApplicationID)
		case errors.Is(err, sarama.ErrNotCoordinatorForConsumer), errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable):
			_ = client.RefreshCoordinator(e.cfg.ApplicationID)
		}
		// Other errors (a rebalance in progress, a lost connection) prove
		// nothing; the lease runs out unless a later heartbeat succeeds.
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leaseSpan is how long after a heartbeat the coordinator keeps this
// member: the session timeout, or the rebalance timeout if shorter.
func (e *Engine) leaseSpan() time.Duration {
	return min(e.cfg.SessionTimeout, e.saramaConfig().Consumer.Group.Rebalance.Timeout)
}

// heartbeatInterval is how often sarama and the lease keeper heartbeat: a
// thirtieth of the session timeout rather than a tenth, since a member
// learns of a rebalance from a heartbeat while the whole group waits.
func (e *Engine) heartbeatInterval() time.Duration {
	return max(e.cfg.SessionTimeout/30, 100*time.Millisecond)
}

// leaseValid reports whether the read lease runs now.
func (r *Router) leaseValid() bool { return r.lease.valid(monoNow()) }

// unconfirmed reports whether p would be answerable here as its active
// but for a lapsed read lease, and how long ago the lease ran out: such a
// copy answers as a replica, its staleness declared, never as the owner.
func (r *Router) unconfirmed(p int32) (age time.Duration, ok bool) {
	now := monoNow()
	proven := time.Duration(r.lease.proven.Load())
	if r.lease.valid(now) || proven == 0 {
		return 0, false
	}
	r.parts.mu.Lock()
	ok = r.parts.answerableLocked(p, time.Now())
	r.parts.mu.Unlock()
	return max(now-proven, 0), ok
}
