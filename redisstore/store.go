package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
)

// Store is a Redis database holding tables (engine.Tables; see OpenTable).
// It is safe for concurrent use by multiple goroutines (go-redis pools its
// connections).
type Store struct {
	client redis.UniversalClient
	keys   keys
	opts   options
	log    *slog.Logger
	where  string // the URL without its password, for messages
	// written detects acknowledged writes that Redis lost (see writeLog).
	written writeLog

	// Set by tests: beforeExec runs between an Apply attempt's checks and
	// its EXEC; migrateHook runs after each step of a migration of the
	// movie layout (an error stops it there); migrateTTL and migrateChunk,
	// when positive, replace the lock's lifetime and the movies per script.
	beforeExec   func()
	migrateHook  func(step string) error
	migrateTTL   time.Duration
	migrateChunk int
}

// ErrOldLayout means OpenTable found the table in the key layout that kept
// a whole table under one hash tag on a Redis Cluster; `keepstate reset`
// (Store.RemoveOldLayout) wipes it.
var ErrOldLayout = errors.New("table in an older cluster key layout")

// Open connects to the Redis deployment at rawURL, read as WithMode says
// (default ModeSingle: redis[s]://[user:password@]host:port/db with
// go-redis query options such as ?dial_timeout=2s), and checks that it
// answers PING; when it does not, the error wraps engine.ErrUnavailable
// and names the URL without its password. Open does not retry. Timeouts
// and retries come from the URL; a connection is dialled at most twice
// per attempt unless dialer_retries says otherwise.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	o := options{prefix: DefaultPrefix, mode: ModeSingle, streams: map[string]TableStream{}}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	client, where, err := newClient(o.mode, rawURL, o.tls)
	if err != nil {
		return nil, err
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{client: client, keys: keys{prefix: o.prefix, cluster: o.mode == ModeCluster}, opts: o,
		log: o.logger.With("store", "redis", "url", where), where: where}
	if err := s.client.Ping(ctx).Err(); err != nil {
		_ = s.client.Close()
		hint := "start redis-server or set --redis-url"
		if redis.IsAuthError(err) || redis.IsPermissionError(err) {
			hint = "check the user and password in --redis-url"
		}
		return nil, fmt.Errorf("redisstore: cannot reach redis at %s (%s): %w: %w", where, hint, engine.ErrUnavailable, err)
	}
	s.log.Debug("redis store open", "mode", o.mode, "prefix", o.prefix, "table_streams", len(o.streams))
	return s, nil
}

// String returns the server's URL without its password.
func (s *Store) String() string { return "redis " + s.where }

// Ping checks that Redis answers; the error wraps engine.ErrUnavailable
// when it does not.
func (s *Store) Ping(ctx context.Context) error {
	return wrap("ping "+s.where, s.client.Ping(ctx).Err())
}

// Close closes the connection pool. It is not safe to call concurrently
// with other methods; calls after Close fail.
func (s *Store) Close() error {
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("redisstore: close: %w", err)
	}
	return nil
}

// RouteClientLogs sends the go-redis client's own log lines (such as
// "failed to dial after 5 attempts") to l at level Warn with
// component=go-redis instead of stderr; a nil l discards them. go-redis
// has one process-wide logger: call it once, from main, before Open. Safe
// for concurrent use.
func RouteClientLogs(l *slog.Logger) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	redis.SetLogger(clientLog{l: l})
}

type clientLog struct{ l *slog.Logger }

func (c clientLog) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	c.l.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// transient reports whether err means Redis cannot serve the request right
// now (so the caller should pause and retry) rather than a refusal of it:
// anything but an error reply (connection refused or reset, timeouts, a
// closed pool), the replies of a server loading, read-only, down, running
// a script, out of memory or client slots, or unable to persist (MISCONF:
// a full disk), and redirections that outlived the client's retries
// (MOVED, ASK: a slot moving or a failover under way).
func transient(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true
	}
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) ||
		redis.IsMasterDownError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMaxClientsError(err) ||
		redis.IsOOMError(err) || redis.IsNoReplicasError(err) || moved || ask ||
		redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") ||
		redis.HasErrorPrefix(err, "BUSY") || redis.HasErrorPrefix(err, "MISCONF")
}

// wrap adds the operation to err and, for a transient error, wraps
// engine.ErrUnavailable too; a nil err stays nil. It never turns an error
// into ErrNotFound or ErrFenced: those come only from decoded replies.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if transient(err) {
		return fmt.Errorf("redisstore: %s: %w: %w", op, engine.ErrUnavailable, err)
	}
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

// scanKeys calls fn with each page of the keys matching pattern (SCAN,
// never KEYS), on a cluster of every master, never concurrently; a key
// moving between nodes meanwhile may be missed or passed twice.
func (s *Store) scanKeys(ctx context.Context, pattern string, count int64, fn func([]string) error) error {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return scanNode(ctx, s.client, pattern, count, fn)
	}
	var mu sync.Mutex
	return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return scanNode(ctx, node, pattern, count, func(page []string) error {
			mu.Lock()
			defer mu.Unlock()
			return fn(page)
		})
	})
}

func scanNode(ctx context.Context, c redis.Cmdable, pattern string, count int64, fn func([]string) error) error {
	for cursor := uint64(0); ; {
		page, next, err := c.Scan(ctx, cursor, pattern, count).Result()
		if err != nil {
			return err
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
		if cursor = next; next == 0 {
			return nil
		}
	}
}

// hmget reads fields of hashes in one pipeline: in one MULTI/EXEC when
// atomic, so that the values come from one moment.
func (s *Store) hmget(ctx context.Context, atomic bool, hashes, fields []string) ([]*redis.SliceCmd, error) {
	run := s.client.Pipelined
	if atomic {
		run = s.client.TxPipelined
	}
	cmds := make([]*redis.SliceCmd, len(hashes))
	_, err := run(ctx, func(pipe redis.Pipeliner) error {
		for i, h := range hashes {
			cmds[i] = pipe.HMGet(ctx, h, fields...)
		}
		return nil
	})
	return cmds, err
}

// unlink deletes keys: in one UNLINK, or on a cluster (where they may be
// in different slots) in one pipeline of an UNLINK per key.
func (s *Store) unlink(ctx context.Context, keys []string) error {
	if !s.keys.cluster {
		return s.client.Unlink(ctx, keys...).Err()
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Unlink(ctx, k)
		}
		return nil
	})
	return err
}
