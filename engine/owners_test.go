package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keepstate/keepstate/internal/testkit"
)

// describingRouter returns a router of cfg for n partitions whose admin
// client (closed with the test) describes the group on cfg.Brokers.
func describingRouter(t *testing.T, cfg Config, n int32) *Router {
	t.Helper()
	e := &Engine{cfg: cfg, topics: cfg.Topics(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, e.saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	r := newRouter(cfg, e.log)
	r.setAdmin(admin)
	r.numParts.Store(n)
	return r
}

// TestMembershipDoesNotWaitBehindAHungBroker holds the broker's answer to
// DescribeGroups: key lookups of local partitions must not wait at all,
// and every other caller must give up at its own deadline, sharing one
// describe instead of queueing behind a lock.
func TestMembershipDoesNotWaitBehindAHungBroker(t *testing.T) {
	k := testkit.StartKfake(t)
	release := make(chan struct{})
	var described atomic.Int64
	k.Cluster().ControlKey(kmsg.DescribeGroups.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		described.Add(1)
		k.Cluster().SleepControl(func() { <-release })
		return nil, nil, false
	})
	released := sync.OnceFunc(func() { close(release) })
	defer released()

	cfg := DefaultConfig()
	cfg.Brokers, cfg.ApplicationID, cfg.AdvertiseAddr = k.Brokers(), "hung-describe", "127.0.0.1:7001"
	r := describingRouter(t, cfg, 3)
	r.parts.set(1, Running)
	r.lease.renew(r.lease.begin(), monoNow(), time.Hour)
	var local int64 = 1
	for PartitionFor(int64Key(local), 3) != 1 {
		local++
	}

	start := time.Now()
	if _, isLocal, err := r.OwnerOf(context.Background(), int64Key(local)); err != nil || !isLocal {
		t.Fatalf("Owner(local movie) = local %v, %v", isLocal, err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Owner of a local running partition took %v", d)
	}
	if n := described.Load(); n != 0 {
		t.Errorf("a local lookup described the group %d times", n)
	}

	const callers = 8
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	start = time.Now()
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := r.Membership(ctx)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d callers with a 300 ms deadline took %v", callers, d)
	}
	for err := range errs {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("Membership with the broker hung = %v, want ErrUnavailable", err)
		}
	}
	if n := described.Load(); n != 1 {
		t.Errorf("%d concurrent callers sent %d describes, want 1 (shared)", callers, n)
	}

	// Once the broker answers, a snapshot comes back (an empty group).
	released()
	testkit.Eventually(t, 10*time.Second, "membership after release", func() error {
		_, err := r.Membership(context.Background())
		return err
	})
}

// TestMembershipWhileRebalancingKeepsTheLastStableMembers answers
// DescribeGroups as Apache Kafka does: with every member's metadata and
// assignment while the group is Stable, and without them (no addresses)
// while it rebalances. A rebalance's snapshot must then name the members,
// owners and standbys of the last stable one, so that a key whose active
// moves can be asked of the standby copies; and a router refreshed right
// after its assignment has that stable snapshot before anyone asked.
func TestMembershipWhileRebalancingKeepsTheLastStableMembers(t *testing.T) {
	k := testkit.StartKfake(t)
	cfg := DefaultConfig()
	cfg.Brokers, cfg.ApplicationID, cfg.AdvertiseAddr = k.Brokers(), "rebalancing-describe", "127.0.0.1:7001"
	repartition := cfg.Topics().Repartition
	peers := []string{"127.0.0.1:7001", "127.0.0.1:7002"}
	var stable atomic.Bool
	stable.Store(true)
	k.Cluster().ControlKey(kmsg.DescribeGroups.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		resp := req.(*kmsg.DescribeGroupsRequest).ResponseKind().(*kmsg.DescribeGroupsResponse)
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group, g.ProtocolType, g.State = cfg.ApplicationID, "consumer", "PreparingRebalance"
		for i, addr := range peers {
			m := kmsg.NewDescribeGroupsResponseGroupMember()
			m.MemberID = fmt.Sprintf("member-%d", i)
			if stable.Load() {
				g.State, g.Protocol = "Stable", "keepstate"
				meta := kmsg.NewConsumerMemberMetadata()
				meta.Topics, meta.UserData = []string{repartition}, memberState{Addr: addr}.encode()
				m.ProtocolMetadata = meta.AppendTo(nil)
				asg := kmsg.NewConsumerMemberAssignment()
				at := kmsg.NewConsumerMemberAssignmentTopic()
				at.Topic, at.Partitions = repartition, []int32{int32(i)}
				asg.Topics = []kmsg.ConsumerMemberAssignmentTopic{at}
				asg.UserData = memberPlan{Standbys: []int32{int32(1 - i)}}.encode()
				m.MemberAssignment = asg.AppendTo(nil)
			}
			g.Members = append(g.Members, m)
		}
		resp.Groups = append(resp.Groups, g)
		return resp, nil, true
	})

	r := describingRouter(t, cfg, 2)

	// The assignment's refresh takes the stable snapshot on its own.
	r.refresh()
	testkit.Eventually(t, 10*time.Second, "the refreshed stable snapshot", func() error {
		if r.owners.stable.Load() == nil {
			return errors.New("no stable snapshot yet")
		}
		return nil
	})
	stable.Store(false)
	r.owners.invalidate()
	m, err := r.Membership(context.Background())
	if err != nil {
		t.Fatalf("Membership while rebalancing: %v", err)
	}
	if !slices.Equal(m.Members, peers) {
		t.Errorf("members while rebalancing = %v, want the last stable %v", m.Members, peers)
	}
	for p, want := range map[int32]string{0: peers[0], 1: peers[1]} {
		if m.Owners[p] != want {
			t.Errorf("owner of %d while rebalancing = %q, want the last stable %q", p, m.Owners[p], want)
		}
		if got := m.Replicas[p]; len(got) != 1 || got[0] != peers[1-p] {
			t.Errorf("standbys of %d while rebalancing = %v, want [%s]", p, got, peers[1-p])
		}
	}
}
