package redisstore

import (
	"crypto/tls"
	"log/slog"
)

// DefaultPrefix is the key prefix used without WithPrefix.
const DefaultPrefix = "keepstate:"

// DefaultStreamMaxLen is the approximate length the averages stream is
// trimmed to without WithStreamMaxLen.
const DefaultStreamMaxLen = 100000

// Option configures Open.
type Option func(*options)

type options struct {
	prefix    string
	streamMax int64
	logger    *slog.Logger
	tls       *tls.Config
}

func defaultOptions() options {
	return options{prefix: DefaultPrefix, streamMax: DefaultStreamMaxLen}
}

// WithPrefix puts every key of the store under prefix (for example the
// application id followed by ":"), so several applications can share one
// Redis database. An empty prefix means DefaultPrefix.
func WithPrefix(prefix string) Option {
	return func(o *options) {
		if prefix != "" {
			o.prefix = prefix
		}
	}
}

// WithStreamMaxLen sets the approximate maximum length (XADD MAXLEN ~ n) of
// the <prefix>rating-averages-stream stream; n <= 0 disables the stream.
func WithStreamMaxLen(n int64) Option {
	return func(o *options) { o.streamMax = n }
}

// WithLogger sets the logger; nil discards logs.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithTLSConfig replaces the TLS configuration of the connection (for
// example to trust a private certificate authority). It turns TLS on even
// for a redis:// URL; for rediss:// URLs without it the system roots are
// trusted.
func WithTLSConfig(c *tls.Config) Option {
	return func(o *options) { o.tls = c }
}

func (o options) log() *slog.Logger {
	if o.logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.logger
}
