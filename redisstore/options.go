package redisstore

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"

	"github.com/keepstate/keepstate/engine"
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
func WithMode(m Mode) Option {
	return func(o *options) {
		if m != "" {
			o.mode = m
		}
	}
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

// WithLogger sets the logger; nil discards logs.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithTLSConfig replaces the TLS configuration of the connection (for
// example to trust a private certificate authority). It turns TLS on even
// for a redis:// URL; for rediss:// URLs without it the system roots are
// trusted.
func WithTLSConfig(c *tls.Config) Option { return func(o *options) { o.tls = c } }

// TableStream is the change stream of a table: one stream entry per
// document an Apply writes, added in the same MULTI/EXEC as the batch (so a
// reader of the stream never sees a write that did not happen, nor misses
// one that did), in the batch's order. Documents a replayed batch skips
// add no entry.
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

// WithTableStream makes every Apply of the table named table add an entry
// to the stream st (see TableStream); the last call for a table wins. For
// example the movie job's table writes <prefix>rating-averages-stream,
// the stream of averages the movie layout wrote, with
//
//	WithTableStream(movies.Name, TableStream{Key: movies.StreamKey,
//		MaxLen: DefaultStreamMaxLen, Fields: movies.StreamFields})
//
// Table.Reset deletes the stream with the table's documents.
func WithTableStream(table string, st TableStream) Option {
	return func(o *options) {
		if o.streams == nil {
			o.streams = make(map[string]TableStream)
		}
		o.streams[table] = st
	}
}

// validate checks the mode, the prefix of a cluster and the table
// streams: each needs a key outside the tables' namespace and a Fields
// function.
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
