package redisstore

import (
	"context"
	"fmt"
	"log/slog"
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
	// written detects acknowledged writes that Redis lost (lostwrites.go).
	written writeLog

	// beforeExec, when set (by tests), runs between an Apply attempt's
	// checks and its EXEC.
	beforeExec func()
	// migrateHook, when set (by tests), runs after each step of a
	// migration of the movie layout; an error stops the migration there.
	// migrateTTL and migrateChunk, when positive, replace the lock's
	// lifetime and the movies moved per script.
	migrateHook  func(step string) error
	migrateTTL   time.Duration
	migrateChunk int
}

// Open connects to the Redis deployment at rawURL, read as WithMode says
// (default ModeSingle: redis://[user:password@]host:port/db, rediss:// for
// TLS, go-redis query options such as ?dial_timeout=2s), and checks that
// it answers PING. When it does not, the error wraps engine.ErrUnavailable
// and names the URL without its password. Open does not retry: the caller
// decides whether to wait for Redis. Timeouts and command retries come
// from the URL (dial_timeout, read_timeout, max_retries, ...); a
// connection is dialled at most twice per attempt unless dialer_retries
// says otherwise.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	o := defaultOptions()
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
	s := &Store{
		client: client,
		keys:   keys{prefix: o.prefix, cluster: o.mode == ModeCluster},
		opts:   o,
		log:    o.log().With("store", "redis", "url", where),
		where:  where,
	}
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
	if err := s.client.Ping(ctx).Err(); err != nil {
		return wrap("ping "+s.where, err)
	}
	return nil
}

// Close closes the connection pool. It is not safe to call concurrently
// with other methods; calls after Close fail.
func (s *Store) Close() error {
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("redisstore: close: %w", err)
	}
	return nil
}
