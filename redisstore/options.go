package redisstore

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/redact"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the key prefix used without WithPrefix.
const DefaultPrefix = "keepstate:"

// DefaultStreamMaxLen is a TableStream.MaxLen for a change stream that
// keeps about the last 100,000 entries: the movie job's stream trims to it
// unless configured otherwise.
const DefaultStreamMaxLen = 100000

// Option configures Open.
type Option func(*options)

type options struct {
	prefix  string
	mode    Mode
	logger  *slog.Logger
	tls     *tls.Config
	streams map[string]TableStream // by table name
}

// WithMode says what kind of deployment the URL names: ModeSingle (the
// default), ModeCluster or ModeSentinel (see Mode for each URL form).
func WithMode(m Mode) Option { return func(o *options) { o.mode = cmp.Or(m, o.mode) } }

// WithPrefix puts every key of the store under prefix (for example the
// application id followed by ":"), so several applications can share one
// Redis database. An empty prefix means DefaultPrefix.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.prefix = cmp.Or(prefix, o.prefix) }
}

// WithLogger sets the logger; nil discards logs.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithTLSConfig replaces the TLS configuration of the connection (for
// example to trust a private certificate authority). It turns TLS on even
// for a redis:// URL; for rediss:// URLs without it the system roots are
// trusted.
func WithTLSConfig(c *tls.Config) Option { return func(o *options) { o.tls = c } }

// TableStream is the change stream of a table: one entry per document an
// Apply writes, in the batch's order and the same MULTI/EXEC (so a reader
// never sees a write that did not happen, nor misses one that did).
// Documents a replayed batch skips add no entry.
type TableStream struct {
	// Key is the stream's key under the store's prefix: "changes" is the
	// key "<prefix>changes". It must not start with "t:" (the tables'
	// namespace).
	Key string
	// MaxLen is the approximate length the stream is trimmed to on every
	// entry (XADD MAXLEN ~ MaxLen); MaxLen <= 0 turns the stream off.
	MaxLen int64
	// Fields returns the field-value pairs of the entry of a written
	// document (strings, numbers or byte slices, as XADD takes them). It
	// must not keep or modify the document, and must not be nil.
	Fields func(engine.Doc) []any
}

// WithTableStream makes every Apply of the table named table add entries
// to the stream st; the last call for a table wins. Table.Reset deletes
// the stream with the table's documents.
func WithTableStream(table string, st TableStream) Option {
	return func(o *options) { o.streams[table] = st }
}

// validate checks the mode, the prefix of a cluster and the table streams.
func (o options) validate() error {
	if _, err := ParseMode(string(o.mode)); err != nil {
		return err
	}
	if o.mode == ModeCluster && strings.ContainsAny(o.prefix, "{}") {
		return fmt.Errorf("redisstore: prefix %q: a cluster's key prefix must not hold { or } (they choose the hash slot): %w",
			o.prefix, engine.ErrInvalid)
	}
	for name, st := range o.streams {
		switch {
		case st.MaxLen <= 0:
		case st.Key == "" || strings.HasPrefix(st.Key, tablesNamespace):
			return fmt.Errorf("redisstore: stream of table %s: key %q is empty or in the tables' namespace %q: %w",
				name, st.Key, tablesNamespace, engine.ErrInvalid)
		case st.Fields == nil:
			return fmt.Errorf("redisstore: stream of table %s: no Fields function: %w", name, engine.ErrInvalid)
		}
	}
	return nil
}

// Mode says what kind of Redis deployment a URL names (WithMode).
type Mode string

// The modes of WithMode. Each reads the URL with go-redis's own parser;
// rediss:// turns TLS on and the userinfo authenticates in every mode.
const (
	// ModeSingle is one server: redis[s]://[user:password@]host:port/db
	// (redis.ParseURL).
	ModeSingle Mode = "single"
	// ModeCluster is a Redis Cluster reached through any of its nodes:
	// redis[s]://[user:password@]host1:port1?addr=host2:port2&addr=host3:port3
	// (redis.ParseClusterURL).
	ModeCluster Mode = "cluster"
	// ModeSentinel is a master found through its Sentinels:
	// redis[s]://[user:password@]sentinel1:port1?addr=sentinel2:port2&master_name=mymaster
	// (redis.ParseFailoverURL); the userinfo authenticates with the
	// Sentinels, the query options username and password with the master.
	ModeSentinel Mode = "sentinel"
)

// ParseMode returns the Mode named s, or an error wrapping
// engine.ErrInvalid.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeSingle, ModeCluster, ModeSentinel:
		return m, nil
	}
	return "", fmt.Errorf("redisstore: unknown redis mode %q (want single, cluster or sentinel): %w", s, engine.ErrInvalid)
}

// newClient builds the go-redis client of mode for rawURL and returns it
// with the URL as messages may show it (no userinfo, no password or
// username query options). Parse errors never include the password.
func newClient(mode Mode, rawURL string, tlsConf *tls.Config) (redis.UniversalClient, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the whole URL, password included
		}
		return nil, "", fmt.Errorf("redisstore: invalid redis url: %w", err)
	}
	where := redactQuery(redact.URL(u.String())) // no userinfo at all: ACL user names are credentials too
	bad := func(err error) (redis.UniversalClient, string, error) {
		return nil, "", fmt.Errorf("redisstore: invalid %s redis url %s: %w", mode, where, err)
	}
	// tune sets the TLS configuration, if any, and fewer dial attempts per
	// command unless the URL sets them: go-redis dials 5 times per attempt
	// and retries a command 3 times, so with Redis down a call would take
	// seconds to report it. Fail sooner; the engine retries unavailable
	// stores by itself.
	tune := func(conf **tls.Config, dials *int) {
		if tlsConf != nil {
			*conf = tlsConf.Clone()
		}
		if *dials == 0 {
			*dials = 2
		}
	}
	switch mode {
	case ModeSingle, "":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return bad(err)
		}
		tune(&o.TLSConfig, &o.DialerRetries)
		return redis.NewClient(o), where, nil
	case ModeCluster:
		o, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return bad(err)
		}
		tune(&o.TLSConfig, &o.DialerRetries)
		return redis.NewClusterClient(o), where, nil
	case ModeSentinel:
		o, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return bad(err)
		}
		if o.MasterName == "" {
			return bad(errors.New("no master_name query option"))
		}
		tune(&o.TLSConfig, &o.DialerRetries)
		return redis.NewFailoverClient(o), where, nil
	}
	_, err = ParseMode(string(mode))
	return nil, "", err
}

// redactQuery replaces the values of the query options that carry
// credentials (password, username, sentinel_password, ...) in raw.
func redactQuery(raw string) string {
	base, query, ok := strings.Cut(raw, "?")
	if !ok {
		return raw
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		name, _, _ := strings.Cut(p, "=")
		if strings.Contains(name, "password") || strings.Contains(name, "username") {
			parts[i] = name + "=" + redact.Marker
		}
	}
	return base + "?" + strings.Join(parts, "&")
}
