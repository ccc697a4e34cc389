package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// ownersTTL is how long a membership snapshot is trusted.
const ownersTTL = 2 * time.Second

// owners caches which member (by advertised API address) owns each
// aggregate partition, read from the group's description.
type owners struct {
	mu      sync.Mutex
	at      time.Time
	byPart  map[int32]string
	members []string
}

// invalidate forgets the snapshot (after a rebalance).
func (o *owners) invalidate() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.at = time.Time{}
}

// Owner returns the advertised API address of the instance that owns the
// partition of movieID, and local=true when that is this instance. While
// the group rebalances and nobody owns the partition it returns an error
// wrapping ErrUnavailable. Safe for concurrent use.
func (e *Engine) Owner(ctx context.Context, movieID int64) (addr string, local bool, err error) {
	n := e.numParts.Load()
	if n == 0 {
		return "", false, fmt.Errorf("engine not connected yet: %w", ErrUnavailable)
	}
	p := PartitionFor(EncodeMovieKey(movieID), n)
	if e.Owns(p) {
		return e.cfg.AdvertiseAddr, true, nil
	}
	byPart, _, err := e.membership(ctx)
	if err != nil {
		return "", false, err
	}
	addr, ok := byPart[p]
	if !ok || addr == "" {
		return "", false, fmt.Errorf("partition %d has no owner right now (rebalancing): %w", p, ErrUnavailable)
	}
	return addr, addr == e.cfg.AdvertiseAddr, nil
}

// Peers returns the advertised API addresses of the other members of the
// group. Safe for concurrent use.
func (e *Engine) Peers(ctx context.Context) ([]string, error) {
	_, members, err := e.membership(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range members {
		if m != e.cfg.AdvertiseAddr && m != "" {
			out = append(out, m)
		}
	}
	return out, nil
}

// membership returns the cached partition owners, describing the group
// when the snapshot is older than ownersTTL.
func (e *Engine) membership(ctx context.Context) (map[int32]string, []string, error) {
	e.owners.mu.Lock()
	defer e.owners.mu.Unlock()
	if time.Since(e.owners.at) < ownersTTL {
		return e.owners.byPart, e.owners.members, nil
	}
	admin := e.admin
	if admin == nil {
		return nil, nil, fmt.Errorf("engine not connected yet: %w", ErrUnavailable)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	groups, err := admin.DescribeConsumerGroups([]string{e.cfg.ApplicationID})
	if err != nil {
		return nil, nil, fmt.Errorf("describe group %s: %v: %w", e.cfg.ApplicationID, err, ErrUnavailable)
	}
	byPart := map[int32]string{}
	var members []string
	for _, g := range groups {
		for _, m := range g.Members {
			meta, err := m.GetMemberMetadata()
			if err != nil || meta == nil {
				continue
			}
			addr := string(meta.UserData)
			members = append(members, addr)
			asg, err := m.GetMemberAssignment()
			if err != nil || asg == nil {
				continue
			}
			for _, p := range asg.Topics[e.topics.Repartition] {
				byPart[p] = addr
			}
		}
	}
	e.owners.byPart, e.owners.members, e.owners.at = byPart, members, time.Now()
	return byPart, members, nil
}

// newAdmin opens the admin client used for group descriptions.
func (e *Engine) newAdmin() (sarama.ClusterAdmin, error) {
	return sarama.NewClusterAdmin(e.cfg.Brokers, e.saramaConfig())
}
