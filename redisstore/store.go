package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/redact"
	"github.com/redis/go-redis/v9"
)

// Store is a Redis database holding tables (engine.Tables; see OpenTable).
// It is safe for concurrent use by multiple goroutines (go-redis pools its
// connections).
type Store struct {
	client *redis.Client
	keys   keys
	opts   options
	log    *slog.Logger
	where  string // the URL without its password, for messages

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

// Open connects to the Redis server at rawURL (redis://[user:password@]host:port/db,
// rediss:// for TLS, go-redis query options such as ?dial_timeout=2s) and
// checks that it answers PING. When it does not, the error wraps
// engine.ErrUnavailable and names the URL without its password. Open does
// not retry: the caller decides whether to wait for Redis. Timeouts and
// command retries come from the URL (dial_timeout, read_timeout,
// max_retries, ...); a connection is dialled at most twice per attempt.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	ropts, where, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if o.tls != nil {
		ropts.TLSConfig = o.tls.Clone()
	}
	if ropts.DialerRetries == 0 {
		// go-redis dials 5 times per attempt and retries a command 3 times:
		// with Redis down a call would take seconds to report it. Fail
		// sooner; the engine retries unavailable stores by itself.
		ropts.DialerRetries = 2
	}
	s := &Store{
		client: redis.NewClient(ropts),
		keys:   keys{prefix: o.prefix},
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
	s.log.Debug("redis store open", "prefix", o.prefix, "table_streams", len(o.streams))
	return s, nil
}

// parseURL parses a Redis URL with go-redis and returns the URL with its
// userinfo redacted for messages. Parse errors never include the password.
func parseURL(rawURL string) (*redis.Options, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the whole URL, password included
		}
		return nil, "", fmt.Errorf("redisstore: invalid redis url: %w", err)
	}
	where := redact.URL(u.String()) // no userinfo at all: ACL user names are credentials too
	ropts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("redisstore: invalid redis url %s: %w", where, err)
	}
	return ropts, where, nil
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
