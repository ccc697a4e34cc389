// Package app wires keepstate together: it turns a Config into a running
// processor, store and HTTP server, and implements the subcommands run,
// produce and reset. The demo and bench subcommands, which start in-process
// fakes (kfake, srfake), live in app/demo and app/bench so that this package
// imports none of them. cmd/keepstate only maps flags and environment
// variables onto Config and calls into these packages.
package app

import (
	"errors"
	"fmt"
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
// name in kebab case and an environment variable KEEPSTATE_<FLAG> with
// dashes turned into underscores (see Flags). Start from Default().
type Config struct {
	Brokers           []string      // --brokers: Kafka bootstrap servers
	SchemaRegistry    string        // --schema-registry: Schema Registry URL
	ApplicationID     string        // --application-id: group id and internal topic prefix
	InputTopic        string        // --input-topic: Avro ratings
	OutputTopic       string        // --output-topic: averages (long key, double value)
	Store             string        // --store: clover | redis
	DataDir           string        // --data-dir: clover store directory
	RedisURL          string        // --redis-url: redis://[user:pass@]host:port/db
	RedisMode         string        // --redis-mode: single | cluster | sentinel (how --redis-url is read; empty: single)
	RedisStreamLen    int64         // --redis-stream-maxlen: MAXLEN ~ of the averages stream
	HTTPAddr          string        // --http-addr: API listen address
	CommitInterval    time.Duration // --commit-interval: flush and commit period
	IdleFlush         time.Duration // --idle-flush: flush a partition whose input stayed empty this long (0: off)
	CacheMaxDocs      int           // --cache-max-docs: flush a partition when it holds this many dirty docs; cache bound between flushes (0: the engine's default)
	CacheBudgetDocs   int           // --cache-budget-docs: documents the partitions of a job cache together (0: automatic, see cacheBudgetDocs; -1: none)
	BufferedRecords   int           // --buffered-records: fetched records each partition buffers ahead of its stage
	LogLevel          string        // --log-level: debug | info | warn | error
	InstanceID        string        // --instance-id: static group membership id (empty: dynamic)
	Partitions        int32         // --partitions: partitions of created topics (0: as many as the input topic)
	ReplicationFactor int16         // --replication-factor: of created topics
	MinInsyncReplicas int16         // --min-insync-replicas: min.insync.replicas of created topics (0: the broker's default)
	Fsync             bool          // --fsync: clover fsyncs every batch (off risks the last batches on power loss)
	// --store-cache-mib: clover's block cache, MiB
	StoreCacheMiB int64
	// --store-write-cache: movies whose version, average and partition clover remembers to write without reading
	StoreWriteCache int
	// --store-disk-reserve-mib: free space clover keeps on its volume; writes wait below it
	StoreDiskReserveMiB int64
	// --on-store-corrupt: what a damaged clover store leads to: rebuild (wipe it and restore from the changelog) | stop
	OnStoreCorrupt string
	// --memory-limit-mib: soft limit of the process's memory, MiB (0: 90% of the container's limit, if any, else
	// the elastic DefaultMemoryTargetMiB, which rises when the live heap needs more; -1: none)
	MemoryLimitMiB int64
	AdvertiseAddr  string        // --advertise-addr: host:port other instances use to reach this API (empty: hostname and the listen port)
	SessionTimeout time.Duration // --session-timeout: consumer group session timeout
	// --processing-guarantee: exactly_once (Kafka transactions) | at_least_once
	ProcessingGuarantee string
	// --transaction-timeout: how long the broker keeps a dead instance's open transaction
	TransactionTimeout time.Duration

	SchemaRegistryUser         string        // --schema-registry-user: basic-auth user (API key) of the registry
	SchemaRegistryPassword     string        // --schema-registry-password: basic-auth password (API secret)
	SchemaRegistryPasswordFile string        // --schema-registry-password-file: file holding the password (a mounted secret)
	PeerSecret                 string        // --peer-secret: shared secret authenticating requests between instances
	PeerSecretFile             string        // --peer-secret-file: file holding the peer secret (a mounted secret)
	StaleDropAfter             time.Duration // --stale-drop-after: clover drops a partition this long after it moved away (0: keep)
	StandbyReplicas            int           // --standby-replicas: clover: instances keeping a standby copy of each partition
	AcceptableLag              int64         // --acceptable-lag: changelog records a member may be behind and still take a partition
	PprofAddr                  string        // --pprof-addr: serve /debug/pprof on this address (empty: off)
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

// Default returns the defaults documented in the README. The engine's
// and the stores' own defaults are taken from their packages, so that
// each default is written down once.
func Default() Config {
	e := engine.DefaultConfig()
	return Config{
		Brokers:             e.Brokers,
		SchemaRegistry:      "http://localhost:8081",
		ApplicationID:       e.ApplicationID,
		InputTopic:          "ratings",
		OutputTopic:         "rating-averages",
		Store:               StoreClover,
		DataDir:             "./data",
		RedisURL:            "redis://localhost:6379/0",
		RedisMode:           string(redisstore.ModeSingle),
		RedisStreamLen:      redisstore.DefaultStreamMaxLen,
		HTTPAddr:            ":7001",
		CommitInterval:      e.CommitInterval,
		IdleFlush:           e.IdleFlush,
		CacheMaxDocs:        0, // the engine's default
		CacheBudgetDocs:     0, // sized from the memory limit at run time (cacheBudgetDocs)
		BufferedRecords:     e.BufferedRecords,
		LogLevel:            "info",
		Partitions:          0,
		ReplicationFactor:   e.ReplicationFactor,
		MinInsyncReplicas:   e.MinInsyncReplicas,
		Fsync:               true,
		StoreCacheMiB:       docstore.DefaultCacheSize >> 20,
		StoreWriteCache:     docstore.DefaultWriteCache,
		StoreDiskReserveMiB: docstore.DefaultDiskReserve >> 20,
		OnStoreCorrupt:      CorruptRebuild,
		SessionTimeout:      e.SessionTimeout,

		ProcessingGuarantee: string(e.ProcessingGuarantee),
		TransactionTimeout:  e.TransactionTimeout,
		StaleDropAfter:      10 * time.Minute,
		StandbyReplicas:     e.StandbyReplicas,
		AcceptableLag:       e.AcceptableLag,
	}
}

// Validate checks every field and returns all problems at once, each
// naming its flag, wrapped in ErrConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: "+format, append([]any{flag}, args...)...))
	}
	if len(c.Brokers) == 0 {
		bad("brokers", "at least one broker is required")
	}
	for _, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			bad("brokers", "%q is not host:port", b)
		}
	}
	if u, err := url.Parse(c.SchemaRegistry); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("schema-registry", "%q is not an http(s) URL", redact.URL(c.SchemaRegistry))
	}
	if c.SchemaRegistryPassword != "" && c.SchemaRegistryPasswordFile != "" {
		bad("schema-registry-password", "give the password or --schema-registry-password-file, not both")
	}
	if c.SchemaRegistryUser == "" && (c.SchemaRegistryPassword != "" || c.SchemaRegistryPasswordFile != "") {
		bad("schema-registry-user", "a registry password needs a user")
	}
	if u, err := url.Parse(c.SchemaRegistry); err == nil && u.User != nil && c.SchemaRegistryUser != "" {
		bad("schema-registry-user", "credentials are both in --schema-registry and in --schema-registry-user; keep only the latter")
	}
	if c.PeerSecret != "" && c.PeerSecretFile != "" {
		bad("peer-secret", "give the secret or --peer-secret-file, not both")
	}
	if c.PeerSecret != "" && len(c.PeerSecret) < 16 {
		bad("peer-secret", "must be at least 16 characters")
	}
	if c.PprofAddr != "" {
		if _, _, err := net.SplitHostPort(c.PprofAddr); err != nil {
			bad("pprof-addr", "%q is not [host]:port", c.PprofAddr)
		}
	}
	if c.StaleDropAfter < 0 {
		bad("stale-drop-after", "must not be negative")
	}
	if c.StandbyReplicas < 0 || c.StandbyReplicas > 8 {
		bad("standby-replicas", "must be between 0 and 8")
	}
	if c.AcceptableLag < 0 {
		bad("acceptable-lag", "must not be negative")
	}
	if c.ApplicationID == "" || strings.ContainsAny(c.ApplicationID, " /\\") {
		bad("application-id", "%q must be non-empty without spaces or slashes", c.ApplicationID)
	}
	if c.InputTopic == "" {
		bad("input-topic", "must not be empty")
	}
	if c.OutputTopic == "" {
		bad("output-topic", "must not be empty")
	}
	switch c.Store {
	case StoreClover:
		if c.DataDir == "" {
			bad("data-dir", "must not be empty with --store=clover")
		}
	case StoreRedis:
		if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			bad("redis-url", "%q is not a redis:// or rediss:// URL", redact.URL(c.RedisURL))
		}
		if _, err := redisstore.ParseMode(c.RedisMode); err != nil && c.RedisMode != "" {
			bad("redis-mode", "unknown mode %q (want single, cluster or sentinel)", c.RedisMode)
		}
	default:
		bad("store", "unknown store %q (want %s or %s)", c.Store, StoreClover, StoreRedis)
	}
	if c.RedisStreamLen < 0 {
		bad("redis-stream-maxlen", "must not be negative")
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		bad("http-addr", "%q is not [host]:port", c.HTTPAddr)
	}
	if c.CommitInterval <= 0 {
		bad("commit-interval", "must be positive")
	}
	if c.IdleFlush < 0 {
		bad("idle-flush", "must not be negative")
	}
	if c.SessionTimeout < time.Second {
		bad("session-timeout", "must be at least 1s")
	}
	switch engine.Guarantee(c.ProcessingGuarantee) {
	case engine.ExactlyOnce:
		if c.TransactionTimeout < time.Second || c.TransactionTimeout > 15*time.Minute {
			bad("transaction-timeout", "must be between 1s and 15m")
		}
	case engine.AtLeastOnce:
	default:
		bad("processing-guarantee", "%q: want %s or %s", c.ProcessingGuarantee, engine.ExactlyOnce, engine.AtLeastOnce)
	}
	if c.AdvertiseAddr != "" {
		if err := engine.ValidPeerAddr(c.AdvertiseAddr); err != nil {
			bad("advertise-addr", "%q is not a bare host:port: %v", clipInput(c.AdvertiseAddr), err)
		}
	}
	if c.CacheMaxDocs < 0 {
		bad("cache-max-docs", "must be positive, or 0 for the default")
	}
	if c.CacheBudgetDocs < -1 {
		bad("cache-budget-docs", "must be positive, 0 (automatic) or -1 (none)")
	}
	if c.BufferedRecords <= 0 {
		bad("buffered-records", "must be positive")
	}
	if c.StoreCacheMiB <= 0 {
		bad("store-cache-mib", "must be positive")
	}
	if c.MemoryLimitMiB < -1 {
		bad("memory-limit-mib", "must be a number of MiB, 0 (automatic) or -1 (none)")
	}
	if c.StoreWriteCache < 0 {
		bad("store-write-cache", "must not be negative (0 turns it off)")
	}
	if c.StoreDiskReserveMiB < 0 {
		bad("store-disk-reserve-mib", "must not be negative (0 turns the check off)")
	}
	if c.OnStoreCorrupt != CorruptRebuild && c.OnStoreCorrupt != CorruptStop {
		bad("on-store-corrupt", "%q: want %s or %s", c.OnStoreCorrupt, CorruptRebuild, CorruptStop)
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		bad("log-level", "%v", err)
	}
	if c.Partitions < 0 {
		bad("partitions", "must not be negative")
	}
	if c.ReplicationFactor < 1 {
		bad("replication-factor", "must be at least 1")
	}
	if c.MinInsyncReplicas < 0 || c.MinInsyncReplicas > c.ReplicationFactor {
		bad("min-insync-replicas", "must be 0 (the broker's default) up to --replication-factor")
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
}

// ParseLogLevel maps debug, info, warn and error to slog levels.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", s)
	}
	return l, nil
}

// clipInput cuts s to 80 bytes for an error message.
func clipInput(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:80] + "..."
}
