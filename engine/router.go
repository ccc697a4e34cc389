package engine

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// Router is an instance's routing and readiness state: the aggregate
// partitions owned here and their states, the revoked ones still answered
// (hand-over), store health, group restarts, and the membership snapshot
// that routes keys to their owner. The engine writes it; the HTTP
// handlers read it. Its locks are never held across a network call nor
// shared with the engine. Safe for concurrent use.
type Router struct {
	appID       string
	self        string // this instance's advertised address
	repartition string
	log         *slog.Logger

	parts    partitionTracker
	lease    readLease // see lease.go
	owners   owners
	restarts restartLog
	writes   writeWaits
	numParts atomic.Int32        // aggregate partitions; 0 until connected
	admin    sarama.ClusterAdmin // guarded by owners.mu
}

// maxStuckAfter is the longest a Kafka write waits before /readyz reports
// it (see writeWaits).
const maxStuckAfter = 25 * time.Second

func newRouter(cfg Config, log *slog.Logger) *Router {
	r := &Router{appID: cfg.ApplicationID, self: cfg.AdvertiseAddr, repartition: cfg.Topics().Repartition, log: log}
	// A write still waiting past Kafka's failure detection (about 13 s)
	// and elections waits on a cluster that takes none: report it then,
	// or past the producers' retries when that is sooner.
	r.writes.stuckAfter = min(2*cfg.TransactionTimeout+5*time.Second, maxStuckAfter)
	return r
}

// Router returns the engine's routing and readiness state.
func (e *Engine) Router() *Router { return e.route }

// setAdmin installs the admin client used to describe the group and
// returns the one it replaces (nil: none).
func (r *Router) setAdmin(a sarama.ClusterAdmin) sarama.ClusterAdmin {
	r.owners.mu.Lock()
	defer r.owners.mu.Unlock()
	old := r.admin
	r.admin = a
	return old
}

// adminClient returns the admin client, nil before the engine connected.
func (r *Router) adminClient() sarama.ClusterAdmin {
	r.owners.mu.Lock()
	defer r.owners.mu.Unlock()
	return r.admin
}

// Owner returns where the record key is answered; see Router.OwnerOf.
func (e *Engine) Owner(ctx context.Context, key []byte) (addr string, local bool, err error) {
	return e.route.OwnerOf(ctx, key)
}

// Membership returns the group's ownership snapshot; see Router.Membership.
func (e *Engine) Membership(ctx context.Context) (Membership, error) { return e.route.Membership(ctx) }

// Partitions returns the state of each partition owned here; see
// Router.Partitions.
func (e *Engine) Partitions() map[int32]PartitionState { return e.route.Partitions() }

// Owns reports whether this instance owns partition p; see Router.Owns.
func (e *Engine) Owns(p int32) bool { return e.route.Owns(p) }

// Ready reports whether this instance is ready to answer; see Router.Ready.
func (e *Engine) Ready() error { return e.route.Ready() }
