package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestReadLease pins the lease's bookkeeping: a renewal runs the lease to
// the heartbeat's send time plus the span less the margin, only the
// current keeper renews or revokes, and a new keeper carries over the
// lease it finds.
func TestReadLease(t *testing.T) {
	var l readLease
	now := monoNow()
	if l.valid(now) {
		t.Fatal("a lease never renewed is valid")
	}
	old := l.begin()
	if prev, ok := l.renew(old, now, 10*time.Second); !ok || prev != 0 {
		t.Errorf("first renewal: got %v, %v; want 0, true (nothing was proven before)", prev, ok)
	}
	if got, want := l.remaining(now), 9*time.Second; got != want {
		t.Errorf("remaining after a 10s span: got %v, want %v (a tenth kept back)", got, want)
	}
	if !l.valid(now+8*time.Second) || l.valid(now+9*time.Second) {
		t.Errorf("lease of 9s from %v: valid at +8s %v, at +9s %v; want true, false", now, l.valid(now+8*time.Second), l.valid(now+9*time.Second))
	}
	if prev, ok := l.renew(old, now-time.Second, 10*time.Second); !ok || prev != now+9*time.Second || l.remaining(now) != 9*time.Second {
		t.Errorf("an older heartbeat: got %v, %v, remaining %v; want the lease it found (%v), unshortened", prev, ok, l.remaining(now), now+9*time.Second)
	}

	cur := l.begin()
	if !l.valid(now) {
		t.Error("a new keeper dropped the running lease")
	}
	l.revoke(old)
	if !l.valid(now) {
		t.Error("the keeper of an ended session revoked the lease")
	}
	if _, ok := l.renew(old, now+time.Minute, 10*time.Second); ok || l.valid(now+time.Minute) {
		t.Error("the keeper of an ended session renewed the lease")
	}
	l.revoke(cur)
	if l.valid(now) {
		t.Error("revoked by the current keeper, the lease is still valid")
	}
	if got := leaseMargin(time.Second); got != 100*time.Millisecond {
		t.Errorf("margin of a 1s span: got %v, want 100ms", got)
	}
}

// TestUnconfirmedCopy: a partition this instance runs answers as an
// unconfirmed copy only while the read lease has lapsed after having been
// proven, aged from when it ran out; a partition not run here never does.
func TestUnconfirmedCopy(t *testing.T) {
	var r Router
	r.parts.states = map[int32]PartitionState{0: Running, 1: Restoring}
	if _, ok := r.unconfirmed(0); ok {
		t.Error("a lease never proven: partition 0 answers as an unconfirmed copy")
	}
	tok := r.lease.begin()
	now := monoNow()
	r.lease.renew(tok, now, 10*time.Second)
	if _, ok := r.unconfirmed(0); ok {
		t.Error("a running lease: partition 0 answers as an unconfirmed copy, want as its owner")
	}
	// A lease that ran out 11 s ago (a heartbeat sent 20 s ago, 9 s proven).
	r.lease.until.Store(int64(now - 11*time.Second))
	r.lease.proven.Store(int64(now - 11*time.Second))
	age, ok := r.unconfirmed(0)
	if !ok || age < 11*time.Second || age > 11*time.Second+time.Minute {
		t.Errorf("lapsed lease, partition 0 RUNNING: got %v, %v; want about 11s, true", age, ok)
	}
	for _, p := range []int32{1, 2} {
		if _, ok := r.unconfirmed(p); ok {
			t.Errorf("partition %d (restoring, or not here) answers as an unconfirmed copy", p)
		}
	}
	r.lease.proven.Store(int64(monoNow() + time.Hour)) // as proven by a fresh heartbeat
	r.lease.revoke(tok)
	if got, now := time.Duration(r.lease.proven.Load()), monoNow(); got > now {
		t.Errorf("revoked: the copy counts as current until %v, beyond now (%v)", got, now)
	}
}

// TestLeaseHeartbeatRedialsDeadConnection lets a lease heartbeat's read
// time out (a paused broker): the next heartbeat must reach the
// coordinator again. sarama keeps a connection whose read timed out, and
// fails every later request on it with the same timeout, until it is
// closed; a lease keeper that did not close it lost its lease for good
// after a coordinator's pause.
func TestLeaseHeartbeatRedialsDeadConnection(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	k := testkit.StartKfake(t)
	var paused atomic.Bool
	k.Cluster().ControlKey(int16(kmsg.Heartbeat), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		if paused.CompareAndSwap(false, true) {
			time.Sleep(3 * readTimeout) // the broker is paused past the read timeout
		}
		return nil, nil, false
	})
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Net.ReadTimeout = readTimeout
	client, err := sarama.NewClient(k.Brokers(), cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer client.Close()
	e := &Engine{cfg: Config{ApplicationID: "lease-redial"}}

	if err := e.heartbeat(client, "m", 1); err == nil || errors.As(err, new(sarama.KError)) {
		t.Fatalf("heartbeat to the paused broker: got %v, want a read timeout", err)
	}
	for i := range 3 {
		// There is no such group: the coordinator answers with an error
		// code, a dead connection with the read timeout again.
		if err := e.heartbeat(client, "m", 1); !errors.As(err, new(sarama.KError)) {
			t.Fatalf("heartbeat %d after the pause: got %v, want an answer of the coordinator (an error code)", i+1, err)
		}
	}
}

// leaseSession is the part of a group session the lease keeper reads.
type leaseSession struct {
	sarama.ConsumerGroupSession
	ctx context.Context
}

func (s leaseSession) Context() context.Context { return s.ctx }
func (s leaseSession) MemberID() string         { return "m" }
func (s leaseSession) GenerationID() int32      { return 1 }

// TestLeaseRevokedThenRenewed has the coordinator answer the lease's
// heartbeats "unknown member" for a while, then OK again, as a paused
// coordinator does when it wakes up from its stale state before it learns
// that another broker took the group over: the lease must be revoked at
// once, and proven again by the next answer that says the member is in
// the generation. A keeper that stopped at the first "unknown member"
// left the instance answering nothing as owner for the rest of a session
// that went on.
func TestLeaseRevokedThenRenewed(t *testing.T) {
	k := testkit.StartKfake(t)
	var phase atomic.Int32 // 0: answer OK, 1: unknown member, 2: OK
	var unknown atomic.Int32
	k.Cluster().ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		if phase.Load() == 1 {
			unknown.Add(1)
			resp.ErrorCode = kerr.UnknownMemberID.Code
		}
		return resp, nil, true
	})
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	client, err := sarama.NewClient(k.Brokers(), cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer client.Close()
	e := &Engine{cfg: Config{ApplicationID: "lease-revoked", SessionTimeout: time.Second}, log: slog.New(slog.DiscardHandler), route: &Router{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.keepLease(leaseSession{ctx: ctx}, client)
	}()
	defer func() { cancel(); <-done }()

	testkit.Eventually(t, 10*time.Second, "lease proven", func() error {
		if !e.route.leaseValid() {
			return errors.New("lease not valid")
		}
		return nil
	})
	phase.Store(1)
	testkit.Eventually(t, 10*time.Second, "lease revoked by an unknown-member answer", func() error {
		if e.route.leaseValid() {
			return fmt.Errorf("lease still valid after %d unknown-member answers", unknown.Load())
		}
		return nil
	})
	testkit.Eventually(t, 10*time.Second, "more unknown-member answers", func() error {
		if n := unknown.Load(); n < 3 {
			return fmt.Errorf("%d unknown-member answers", n)
		}
		return nil
	})
	phase.Store(2)
	testkit.Eventually(t, 10*time.Second, "lease proven again once the coordinator knows the member", func() error {
		if !e.route.leaseValid() {
			return errors.New("lease not valid")
		}
		return nil
	})
}

// remaining returns how long the lease still runs at now (negative: it
// lapsed that long ago, or was never proven or revoked when until is 0).
func (l *readLease) remaining(now time.Duration) time.Duration {
	return time.Duration(l.until.Load()) - now
}
