// Package app wires keepstate together: it turns a Config into a running
// processor, store and HTTP server, and implements the subcommands run,
// produce and reset. demo and bench, which start in-process fakes, live in
// app/demo and app/bench so that this package imports none of them.
package app

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/redact"
	"github.com/keepstate/keepstate/redisstore"
)

// ErrConfig is wrapped by every configuration error returned by Validate.
var ErrConfig = errors.New("invalid configuration")

// Store names accepted by Config.Store.
const (
	StoreClover = "clover"
	StoreRedis  = "redis"
)

// What Config.OnStoreCorrupt accepts: what a clover store that fails its
// checksums (engine.ErrCorrupt) leads to.
const (
	// CorruptRebuild stops the jobs, wipes the store and starts them
	// again on an empty one, which they restore from their changelogs; at
	// most maxRebuilds times per process.
	CorruptRebuild = "rebuild"
	// CorruptStop makes Run return the error and leaves the files (and
	// the marker that makes the next start refuse them).
	CorruptStop = "stop"
)

// Config is every setting of keepstate. Each field has a flag of the same
// name in kebab case (RedisStreamLen: --redis-stream-maxlen), whose help in
// internal/cli says more, and an environment variable KEEPSTATE_<FLAG> with
// dashes turned into underscores. Start from Default().
type Config struct {
	Brokers                 []string // Kafka bootstrap servers
	SchemaRegistry          string   // Schema Registry URL
	ApplicationID           string   // group id and internal topic prefix
	InputTopic, OutputTopic string   // Avro ratings in; averages (long key, double value) out
	Store                   string   // StoreClover or StoreRedis
	DataDir                 string   // clover store directory
	RedisURL                string   // redis://[user:pass@]host:port/db
	RedisMode               string   // single | cluster | sentinel (how RedisURL is read; empty: single)
	RedisStreamLen          int64    // MAXLEN ~ of the averages stream
	HTTPAddr                string   // API listen address
	CommitInterval          time.Duration
	IdleFlush               time.Duration // flush a partition whose input stayed empty this long (0: off)
	CacheMaxDocs            int           // dirty docs that flush a partition; its cache bound (0: the engine's)
	CacheBudgetDocs         int           // docs a job's partitions cache together (0: automatic; -1: none)
	BufferedRecords         int           // fetched records each partition buffers ahead of its stage
	LogLevel                string        // debug | info | warn | error
	InstanceID              string        // static group membership id (empty: dynamic)
	Partitions              int32         // of created topics (0: as many as the input topic)
	ReplicationFactor       int16         // of created topics
	MinInsyncReplicas       int16         // min.insync.replicas of created topics (0: the broker's default)
	Fsync                   bool          // clover fsyncs every batch (off risks the last ones on power loss)
	StoreCacheMiB           int64         // clover's block cache, MiB
	StoreWriteCache         int           // movies clover remembers, to write them without reading
	StoreDiskReserveMiB     int64         // free space clover keeps on its volume; writes wait below it
	OnStoreCorrupt          string        // CorruptRebuild or CorruptStop
	// Soft limit of the process's memory, MiB (0: 90% of the container's limit, if any, else the
	// elastic DefaultMemoryTargetMiB, which rises when the live heap needs more; -1: none).
	MemoryLimitMiB      int64
	AdvertiseAddr       string        // host:port peers reach this API at (empty: hostname and listen port)
	SessionTimeout      time.Duration // consumer group session timeout
	ProcessingGuarantee string        // exactly_once (Kafka transactions) | at_least_once
	TransactionTimeout  time.Duration // how long the broker keeps a dead instance's open transaction

	SchemaRegistryUser         string        // basic-auth user (API key) of the registry
	SchemaRegistryPassword     string        // basic-auth password (API secret)
	SchemaRegistryPasswordFile string        // file holding the password (a mounted secret)
	PeerSecret                 string        // shared secret authenticating requests between instances
	PeerSecretFile             string        // file holding the peer secret (a mounted secret)
	StaleDropAfter             time.Duration // clover drops a partition this long after it moved away (0: keep)
	StandbyReplicas            int           // clover: instances keeping a standby copy of each partition
	AcceptableLag              int64         // changelog records a member may lag and still take a partition
	PprofAddr                  string        // serve /debug/pprof on this address (empty: off)
}

// Secrets are the credentials read from their files (or taken from the
// config): registry password and peer secret.
type Secrets struct {
	RegistryPassword string
	PeerSecret       []byte
}

// ReadSecrets returns the registry password and the peer secret, reading
// the --*-file options when set (trailing newlines are dropped, as written
// by `kubectl create secret` and most editors). Errors name the option but
// never the content.
func (c Config) ReadSecrets() (Secrets, error) {
	password, peer := c.SchemaRegistryPassword, c.PeerSecret
	for _, f := range []struct {
		flag, path string
		dst        *string
	}{
		{"schema-registry-password-file", c.SchemaRegistryPasswordFile, &password},
		{"peer-secret-file", c.PeerSecretFile, &peer},
	} {
		if f.path == "" {
			continue
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			return Secrets{}, fmt.Errorf("%w: --%s: %w", ErrConfig, f.flag, err)
		}
		if *f.dst = strings.TrimRight(string(b), "\r\n"); *f.dst == "" {
			return Secrets{}, fmt.Errorf("%w: --%s: %s is empty", ErrConfig, f.flag, f.path)
		}
	}
	return Secrets{RegistryPassword: password, PeerSecret: []byte(peer)}, nil
}

// Default returns the defaults documented in the README, taking the
// engine's and the stores' own from their packages. CacheBudgetDocs 0 is
// sized from the memory limit at run time.
func Default() Config {
	e := engine.DefaultConfig()
	return Config{
		Brokers: e.Brokers, SchemaRegistry: "http://localhost:8081", ApplicationID: e.ApplicationID,
		InputTopic: "ratings", OutputTopic: "rating-averages", HTTPAddr: ":7001", LogLevel: "info",
		Store: StoreClover, DataDir: "./data", Fsync: true, OnStoreCorrupt: CorruptRebuild,
		StoreCacheMiB: docstore.DefaultCacheSize >> 20, StoreWriteCache: docstore.DefaultWriteCache,
		StoreDiskReserveMiB: docstore.DefaultDiskReserve >> 20, RedisURL: "redis://localhost:6379/0",
		RedisMode: string(redisstore.ModeSingle), RedisStreamLen: redisstore.DefaultStreamMaxLen,
		CommitInterval: e.CommitInterval, IdleFlush: e.IdleFlush, BufferedRecords: e.BufferedRecords,
		ReplicationFactor: e.ReplicationFactor, MinInsyncReplicas: e.MinInsyncReplicas,
		SessionTimeout: e.SessionTimeout, ProcessingGuarantee: string(e.ProcessingGuarantee),
		TransactionTimeout: e.TransactionTimeout, StaleDropAfter: 10 * time.Minute,
		StandbyReplicas: e.StandbyReplicas, AcceptableLag: e.AcceptableLag,
	}
}

// Validate checks every field and returns all problems at once, each
// naming its flag, wrapped in ErrConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(failed bool, flag, format string, args ...any) {
		if failed {
			errs = append(errs, fmt.Errorf("--%s: "+format, append([]any{flag}, args...)...))
		}
	}
	bad(len(c.Brokers) == 0, "brokers", "at least one broker is required")
	for _, b := range c.Brokers {
		bad(!isHostPort(b), "brokers", "%q is not host:port", b)
	}
	reg, err := url.Parse(c.SchemaRegistry)
	bad(err != nil || (reg.Scheme != "http" && reg.Scheme != "https") || reg.Host == "",
		"schema-registry", "%q is not an http(s) URL", redact.URL(c.SchemaRegistry))
	bad(c.SchemaRegistryPassword != "" && c.SchemaRegistryPasswordFile != "",
		"schema-registry-password", "give the password or --schema-registry-password-file, not both")
	bad(c.SchemaRegistryUser == "" && (c.SchemaRegistryPassword != "" || c.SchemaRegistryPasswordFile != ""),
		"schema-registry-user", "a registry password needs a user")
	bad(err == nil && reg.User != nil && c.SchemaRegistryUser != "", "schema-registry-user",
		"credentials are both in --schema-registry and in --schema-registry-user; keep only the latter")
	bad(c.PeerSecret != "" && c.PeerSecretFile != "",
		"peer-secret", "give the secret or --peer-secret-file, not both")
	bad(c.PeerSecret != "" && len(c.PeerSecret) < 16, "peer-secret", "must be at least 16 characters")
	bad(c.PprofAddr != "" && !isHostPort(c.PprofAddr), "pprof-addr", "%q is not [host]:port", c.PprofAddr)
	bad(c.StaleDropAfter < 0, "stale-drop-after", "must not be negative")
	bad(c.StandbyReplicas < 0 || c.StandbyReplicas > 8, "standby-replicas", "must be between 0 and 8")
	bad(c.AcceptableLag < 0, "acceptable-lag", "must not be negative")
	bad(c.ApplicationID == "" || strings.ContainsAny(c.ApplicationID, " /\\"),
		"application-id", "%q must be non-empty without spaces or slashes", c.ApplicationID)
	bad(c.InputTopic == "", "input-topic", "must not be empty")
	bad(c.OutputTopic == "", "output-topic", "must not be empty")
	switch c.Store {
	case StoreClover:
		bad(c.DataDir == "", "data-dir", "must not be empty with --store=clover")
	case StoreRedis:
		u, err := url.Parse(c.RedisURL)
		bad(err != nil || (u.Scheme != "redis" && u.Scheme != "rediss"),
			"redis-url", "%q is not a redis:// or rediss:// URL", redact.URL(c.RedisURL))
		_, err = redisstore.ParseMode(c.RedisMode)
		bad(err != nil && c.RedisMode != "",
			"redis-mode", "unknown mode %q (want single, cluster or sentinel)", c.RedisMode)
	default:
		bad(true, "store", "unknown store %q (want %s or %s)", c.Store, StoreClover, StoreRedis)
	}
	bad(c.RedisStreamLen < 0, "redis-stream-maxlen", "must not be negative")
	bad(!isHostPort(c.HTTPAddr), "http-addr", "%q is not [host]:port", c.HTTPAddr)
	bad(c.CommitInterval <= 0, "commit-interval", "must be positive")
	bad(c.IdleFlush < 0, "idle-flush", "must not be negative")
	bad(c.SessionTimeout < time.Second, "session-timeout", "must be at least 1s")
	switch engine.Guarantee(c.ProcessingGuarantee) {
	case engine.ExactlyOnce:
		bad(c.TransactionTimeout < time.Second || c.TransactionTimeout > 15*time.Minute,
			"transaction-timeout", "must be between 1s and 15m")
	case engine.AtLeastOnce:
	default:
		bad(true, "processing-guarantee", "%q: want %s or %s",
			c.ProcessingGuarantee, engine.ExactlyOnce, engine.AtLeastOnce)
	}
	if c.AdvertiseAddr != "" {
		err := engine.ValidPeerAddr(c.AdvertiseAddr)
		bad(err != nil, "advertise-addr", "%q is not a bare host:port: %v", clipInput(c.AdvertiseAddr), err)
	}
	bad(c.CacheMaxDocs < 0, "cache-max-docs", "must be positive, or 0 for the default")
	bad(c.CacheBudgetDocs < -1, "cache-budget-docs", "must be positive, 0 (automatic) or -1 (none)")
	bad(c.BufferedRecords <= 0, "buffered-records", "must be positive")
	bad(c.StoreCacheMiB <= 0, "store-cache-mib", "must be positive")
	bad(c.MemoryLimitMiB < -1, "memory-limit-mib", "must be a number of MiB, 0 (automatic) or -1 (none)")
	bad(c.StoreWriteCache < 0, "store-write-cache", "must not be negative (0 turns it off)")
	bad(c.StoreDiskReserveMiB < 0, "store-disk-reserve-mib", "must not be negative (0 turns the check off)")
	bad(c.OnStoreCorrupt != CorruptRebuild && c.OnStoreCorrupt != CorruptStop,
		"on-store-corrupt", "%q: want %s or %s", c.OnStoreCorrupt, CorruptRebuild, CorruptStop)
	_, err = ParseLogLevel(c.LogLevel)
	bad(err != nil, "log-level", "%v", err)
	bad(c.Partitions < 0, "partitions", "must not be negative")
	bad(c.ReplicationFactor < 1, "replication-factor", "must be at least 1")
	bad(c.MinInsyncReplicas < 0 || c.MinInsyncReplicas > c.ReplicationFactor,
		"min-insync-replicas", "must be 0 (the broker's default) up to --replication-factor")
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
}

// isHostPort reports whether s splits into [host]:port.
func isHostPort(s string) bool {
	_, _, err := net.SplitHostPort(s)
	return err == nil
}

// ParseLogLevel maps debug, info, warn and error to slog levels.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", s)
	}
	return l, nil
}

// NewLogger returns a text logger writing to w at the configured level.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	l, err := ParseLogLevel(level)
	if err != nil {
		return nil, err
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// discardLogger is l, or a logger that discards for nil.
func discardLogger(l *slog.Logger) *slog.Logger { return cmp.Or(l, slog.New(slog.DiscardHandler)) }

// clipInput cuts s to 80 bytes for an error message.
func clipInput(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:80] + "..."
}
