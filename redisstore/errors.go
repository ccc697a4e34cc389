package redisstore

import (
	"errors"
	"fmt"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
)

// ErrOldLayout means OpenTable found the table in the key layout that kept
// a whole table under one hash tag on a Redis Cluster; `keepstate reset`
// (Store.RemoveOldLayout) wipes it.
var ErrOldLayout = errors.New("table in an older cluster key layout")

// transient reports whether err means Redis cannot serve the request right
// now (so the caller should pause and retry) rather than a refusal of the
// request itself. Everything that is not an error reply of the server
// (connection refused or reset, timeouts, a closed pool) is transient, and so
// are the server replies of a server that is loading, read-only, down, busy
// running a script, out of memory or out of client slots, or unable to
// persist writes (MISCONF: its disk is full), and a cluster's redirections
// that outlived the client's own retries (MOVED, ASK: a slot moving or a
// failover under way).
func transient(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true
	}
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) ||
		redis.IsMasterDownError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMaxClientsError(err) ||
		redis.IsOOMError(err) || redis.IsNoReplicasError(err) ||
		redis.HasErrorPrefix(err, "BUSY") || moved(err) ||
		// Writes refused because the server cannot persist them (a full
		// disk under its AOF or RDB file): they succeed again once it can.
		redis.HasErrorPrefix(err, "MISCONF")
}

// wrap adds the operation to err and, for a transient error, wraps
// engine.ErrUnavailable too. It never turns an error into ErrNotFound or
// ErrFenced: those come only from decoded replies.
func wrap(op string, err error) error {
	if transient(err) {
		return fmt.Errorf("redisstore: %s: %w: %w", op, engine.ErrUnavailable, err)
	}
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

// moved reports whether err is a MOVED or ASK redirection.
func moved(err error) bool {
	_, m := redis.IsMovedError(err)
	_, a := redis.IsAskError(err)
	return m || a || redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}
