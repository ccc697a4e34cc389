package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"golang.org/x/sync/singleflight"
)

// Timing of membership snapshots: a snapshot is trusted for ownersTTL;
// describing the group again is bounded by describeTimeout, whatever the
// caller's deadline, so no request waits behind a hung broker call.
const (
	ownersTTL       = 2 * time.Second
	describeTimeout = 3 * time.Second
)

// Membership is a snapshot of which instance owns each aggregate partition,
// taken from the consumer group's description. Owners holds only members
// whose advertised address is a valid bare host:port (see ValidPeerAddr);
// a partition absent from Owners has no usable owner right now.
type Membership struct {
	// Partitions is the number of aggregate partitions.
	Partitions int32
	// Self is this instance's advertised address.
	Self string
	// Owners maps a partition to the advertised address of its owner.
	Owners map[int32]string
	// Replicas maps a partition to the advertised addresses of the members
	// keeping a standby copy of it (see assign.go); empty while the group
	// runs an older build's assignment.
	Replicas map[int32][]string
	// Members are the advertised addresses of every member, sorted; while
	// the group rebalances, those of the last stable snapshot.
	Members []string
	// Taken is when the group was described.
	Taken time.Time
}

// owners caches the last membership snapshot. Readers never hold a lock
// across the network: the snapshot is an atomic pointer and a refresh runs
// once (singleflight) in its own goroutine with a deadline.
type owners struct {
	snap   atomic.Pointer[Membership]
	stable atomic.Pointer[Membership] // the last taken while not rebalancing
	flight singleflight.Group

	mu       sync.Mutex // guards Router.admin and rejected
	rejected map[string]bool
}

// invalidate forgets the snapshot (after a rebalance).
func (o *owners) invalidate() { o.snap.Store(nil) }

// refresh describes the group in the background, so that the snapshot of
// a just-assigned generation is there before the next rebalance hides the
// members' addresses (a new member needs it to find the standbys of the
// partitions that rebalance moves). The next Membership retries errors.
func (r *Router) refresh() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), describeTimeout)
		defer cancel()
		_, _ = r.Membership(ctx)
	}()
}

// OwnerOf returns where the record key key can be answered: local=true
// when its partition is RUNNING here (or in hand-over), else the validated
// address of its owner. The error wraps ErrUnavailable while the partition
// is RESTORING here or nobody usable owns it, and ErrLeaseLapsed when the
// read lease has lapsed and the group still names this instance. Safe for
// concurrent use; it never blocks longer than ctx or describeTimeout.
func (r *Router) OwnerOf(ctx context.Context, key []byte) (addr string, local bool, err error) {
	p, err := r.partitionOf(key)
	if err != nil {
		return "", false, err
	}
	if r.answerable(p) {
		return r.self, true, nil
	}
	leased := r.leaseValid()
	if st, ok := r.partitionState(p); ok && leased {
		return "", false, fmt.Errorf("partition %d is %s on this instance: %w", p, st, ErrUnavailable)
	}
	m, err := r.Membership(ctx)
	if err != nil {
		return "", false, err
	}
	addr, ok := m.Owners[p]
	switch {
	case ok && addr != r.self:
		return addr, false, nil
	case !leased && (ok || r.Owns(p)):
		return "", false, r.errLeaseLapsed(p)
	}
	// Owned by this address in a snapshot taken before this instance
	// lost the partition: nobody is known to run it.
	return "", false, fmt.Errorf("partition %d has no owner right now (rebalancing): %w", p, ErrUnavailable)
}

// partitionOf returns the aggregate partition of key; ErrUnavailable
// before the engine connected.
func (r *Router) partitionOf(key []byte) (int32, error) {
	n := r.numParts.Load()
	if n == 0 {
		return 0, fmt.Errorf("engine not connected yet: %w", ErrUnavailable)
	}
	return PartitionFor(key, n), nil
}

// Membership returns the current ownership snapshot, describing the group
// when the cached one is older than ownersTTL. Concurrent callers share one
// describe; each waits at most until its ctx ends. Errors wrap
// ErrUnavailable. Safe for concurrent use.
func (r *Router) Membership(ctx context.Context) (Membership, error) {
	if m := r.owners.snap.Load(); m != nil && time.Since(m.Taken) < ownersTTL {
		return *m, nil
	}
	ch := r.owners.flight.DoChan("describe", func() (any, error) {
		m, err := r.describe()
		if err == nil {
			r.owners.snap.Store(&m)
		}
		return m, err
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return Membership{}, res.Err
		}
		return res.Val.(Membership), nil
	case <-ctx.Done():
		return Membership{}, fmt.Errorf("describe group %s: %w: %w", r.appID, ctx.Err(), ErrUnavailable)
	}
}

// describe asks the broker for the group's members and assignments. sarama
// takes no context, so the call runs in its own goroutine and describe
// gives up after describeTimeout (singleflight keeps one in flight).
func (r *Router) describe() (Membership, error) {
	r.owners.mu.Lock()
	admin := r.admin
	r.owners.mu.Unlock()
	if admin == nil {
		return Membership{}, fmt.Errorf("engine not connected yet: %w", ErrUnavailable)
	}
	type result struct {
		groups []*sarama.GroupDescription
		err    error
	}
	done := make(chan result, 1)
	go func() {
		g, err := admin.DescribeConsumerGroups([]string{r.appID})
		done <- result{g, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(describeTimeout):
		return Membership{}, fmt.Errorf("describe group %s: no answer in %v: %w", r.appID, describeTimeout, ErrUnavailable)
	}
	if res.err != nil {
		return Membership{}, fmt.Errorf("describe group %s: %v: %w", r.appID, res.err, ErrUnavailable)
	}
	m := Membership{Partitions: r.numParts.Load(), Self: r.self, Owners: map[int32]string{},
		Replicas: map[int32][]string{}, Taken: time.Now()}
	rebalancing := false
	for _, g := range res.groups {
		rebalancing = rebalancing || (g.State != "Stable" && g.State != "Empty" && g.State != "Dead")
		for _, mem := range g.Members {
			meta, err := mem.GetMemberMetadata()
			if err != nil || meta == nil {
				continue
			}
			st, err := decodeMemberState(meta.UserData)
			if err != nil {
				continue
			}
			addr := st.Addr
			if err := ValidPeerAddr(addr); err != nil {
				r.rejectPeer(mem.MemberId, addr, err)
				continue
			}
			m.Members = append(m.Members, addr)
			asg, err := mem.GetMemberAssignment()
			if err != nil || asg == nil {
				continue
			}
			for _, p := range asg.Topics[r.repartition] {
				if p >= 0 && p < m.Partitions {
					m.Owners[p] = addr
				}
			}
			if standbys, _, err := decodeReplicas(asg.UserData); err == nil {
				for _, p := range standbys {
					if p >= 0 && p < m.Partitions {
						m.Replicas[p] = append(m.Replicas[p], addr)
					}
				}
			}
		}
	}
	slices.Sort(m.Members)
	m.Members = slices.Compact(m.Members)
	// While the group rebalances it shows no assignment (Apache Kafka not
	// even addresses): the last stable snapshot is the best guess, as a
	// peer answers only what it can and standbys keep their copies.
	if rebalancing && len(m.Owners) == 0 {
		if last := r.owners.stable.Load(); last != nil {
			m.Owners, m.Replicas = last.Owners, last.Replicas
			if len(m.Members) == 0 {
				m.Members = last.Members
			}
		}
	} else if len(m.Owners) > 0 {
		r.owners.stable.Store(&m)
	}
	return m, nil
}

// rejectPeer logs (once per address) a member whose advertised address is
// not a bare host:port; its partitions are treated as having no owner.
func (r *Router) rejectPeer(member, addr string, err error) {
	r.owners.mu.Lock()
	defer r.owners.mu.Unlock()
	if r.owners.rejected == nil {
		r.owners.rejected = map[string]bool{}
	}
	if r.owners.rejected[addr] || len(r.owners.rejected) > 100 {
		return
	}
	r.owners.rejected[addr] = true
	r.log.Warn("ignoring group member with an invalid advertised address", "member", member, "addr", truncate(addr, 64), "err", err)
}
