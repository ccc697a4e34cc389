// Package cli holds the flags of the keepstate command that configure an
// app.Config, and their environment variables: every flag reads
// KEEPSTATE_<FLAG> (upper case, dashes as underscores) when it is not given
// on the command line. deploytest checks the manifests against these flags.
package cli

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/keepstate/keepstate/app"
)

// EnvName returns the environment variable of a flag: KEEPSTATE_ + upper
// case with dashes as underscores.
func EnvName(flagName string) string {
	return "KEEPSTATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// CommonFlags registers the flags shared by run, demo and reset on fs.
func CommonFlags(fs *flag.FlagSet, c *app.Config) {
	BrokersFlag(fs, &c.Brokers)
	fs.StringVar(&c.SchemaRegistry, "schema-registry", c.SchemaRegistry, "Schema Registry URL")
	fs.StringVar(&c.ApplicationID, "application-id", c.ApplicationID, "consumer group id and prefix of internal topics")
	fs.StringVar(&c.InputTopic, "input-topic", c.InputTopic, "topic of Avro ratings")
	fs.StringVar(&c.OutputTopic, "output-topic", c.OutputTopic, "topic of averages (long key, double value)")
	fs.StringVar(&c.Store, "store", c.Store, "state store: clover or redis")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the clover store")
	fs.StringVar(&c.RedisURL, "redis-url", c.RedisURL, "Redis URL: redis[s]://[user:password@]host:port/db")
	fs.StringVar(&c.RedisMode, "redis-mode", c.RedisMode, "how --redis-url is read: single (one server), cluster (a Redis Cluster: ?addr=host:port for more nodes) or sentinel (?master_name=name, ?addr= for more Sentinels)")
	fs.Int64Var(&c.RedisStreamLen, "redis-stream-maxlen", c.RedisStreamLen, "approximate MAXLEN of the Redis averages stream")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address of the API")
	fs.DurationVar(&c.CommitInterval, "commit-interval", c.CommitInterval, "how often state is flushed and offsets committed")
	fs.DurationVar(&c.IdleFlush, "idle-flush", c.IdleFlush, "flush a partition before the commit interval once its input stayed empty this long and it read everything the broker holds (0: off)")
	fs.IntVar(&c.CacheMaxDocs, "cache-max-docs", c.CacheMaxDocs, "flush a partition early when it holds this many changed documents; also the most documents a partition keeps cached between flushes (least recently used go first); 0: 10000")
	fs.IntVar(&c.CacheBudgetDocs, "cache-budget-docs", c.CacheBudgetDocs, "the most documents the partitions of a job cache together: each partition gets an equal share (at most --cache-max-docs, at least 250), so a failover that moves partitions here does not multiply the memory; 0: 120 per MiB of Go's share of the memory limit or target (--memory-limit-mib), between 3000 and 30000 (split between the jobs), then moved with the live heap; 30000 with --memory-limit-mib -1; none when only --cache-max-docs is set; -1: none")
	fs.IntVar(&c.BufferedRecords, "buffered-records", c.BufferedRecords, "fetched records each partition buffers ahead of its stage (as Kafka Streams' buffered.records.per.partition); memory up to this × the largest record × partitions owned; lower it for very large records")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.InstanceID, "instance-id", c.InstanceID, "static group membership id, stable per instance (empty: dynamic membership)")
	fs.Func("partitions", "partitions of the topics keepstate creates (default: as many as the input topic)", intFlag(&c.Partitions))
	fs.Func("replication-factor", "replication factor of the topics keepstate creates (default 1)", intFlag(&c.ReplicationFactor))
	fs.Func("min-insync-replicas", "min.insync.replicas of the topics keepstate creates: replicas that must have a write before it succeeds (default 0: the broker's)",
		intFlag(&c.MinInsyncReplicas))
	fs.StringVar(&c.AdvertiseAddr, "advertise-addr", c.AdvertiseAddr, "host:port other instances use to reach this API (default: hostname and the --http-addr port)")
	fs.DurationVar(&c.SessionTimeout, "session-timeout", c.SessionTimeout, "consumer group session timeout: how long a silent instance keeps its partitions")
	fs.StringVar(&c.PprofAddr, "pprof-addr", c.PprofAddr, "serve Go's profiler (/debug/pprof) on this address, e.g. localhost:6060 (off when empty; never exposed on --http-addr)")
	fs.StringVar(&c.ProcessingGuarantee, "processing-guarantee", c.ProcessingGuarantee,
		"exactly_once (Kafka transactions: a paused or partitioned instance cannot write after losing its partitions) or at_least_once (brokers without transactions; unsafe against such an instance)")
	fs.DurationVar(&c.TransactionTimeout, "transaction-timeout", c.TransactionTimeout, "exactly_once: how long the broker keeps a dead instance's open transaction before aborting it")
	fs.BoolVar(&c.Fsync, "fsync", c.Fsync, "clover: fsync every batch (turning it off risks the last batches on power loss)")
	fs.Int64Var(&c.StoreCacheMiB, "store-cache-mib", c.StoreCacheMiB, "clover: block cache of the store engine, MiB (memory besides the operating system's page cache)")
	fs.Int64Var(&c.MemoryLimitMiB, "memory-limit-mib", c.MemoryLimitMiB, fmt.Sprintf("soft limit of the process's memory, MiB: the garbage collector works harder near it (Go's GOMEMLIMIT, less 3%% headroom and clover's block cache and memtables when they are outside Go's heap); 0: 90%% of the container's memory limit if there is one, else a %d MiB target that rises when the live heap needs more (GOMEMLIMIT, if set, wins); -1: none", app.DefaultMemoryTargetMiB))
	fs.IntVar(&c.StoreWriteCache, "store-write-cache", c.StoreWriteCache, "clover: movies whose state the store remembers (~110 B each) so that it writes them without reading, and loads them without searching (a restore into an empty store keeps up to 2M while it lasts); 0 turns it off")
	fs.Int64Var(&c.StoreDiskReserveMiB, "store-disk-reserve-mib", c.StoreDiskReserveMiB, "clover: free space, MiB, the store keeps on its volume; below it writes wait (readyz 503) until space is freed; 0 turns the check off")
	fs.StringVar(&c.OnStoreCorrupt, "on-store-corrupt", c.OnStoreCorrupt, "clover: what a store file that fails its checksum leads to: rebuild (the job stops, the store is wiped and restored from the changelog, in the same process) or stop (exit with an error and leave the files; the next start refuses them until they are moved away or the flag says rebuild)")
	RegistryAuthFlags(fs, &c.SchemaRegistryUser, &c.SchemaRegistryPassword, &c.SchemaRegistryPasswordFile)
	fs.StringVar(&c.PeerSecret, "peer-secret", c.PeerSecret, "clover: shared secret authenticating queries routed between instances (the same on every instance, 16+ characters)")
	fs.StringVar(&c.PeerSecretFile, "peer-secret-file", c.PeerSecretFile, "clover: file holding the peer secret (e.g. a mounted Kubernetes secret)")
	fs.DurationVar(&c.StaleDropAfter, "stale-drop-after", c.StaleDropAfter, "clover: delete a partition's documents this long after it moved to another instance (0: keep them)")
	fs.IntVar(&c.StandbyReplicas, "standby-replicas", c.StandbyReplicas, "clover: how many other instances keep a standby copy of each partition, tailing its changelog, so that it moves with a short replay (0: none)")
	fs.Int64Var(&c.AcceptableLag, "acceptable-lag", c.AcceptableLag, "changelog records an instance may be behind on a partition and still take it; a farther one warms up first")
}

// intFlag parses a flag's value into *dst, which it leaves alone when the
// value is not a number.
func intFlag[T int16 | int32](dst *T) func(string) error {
	return func(s string) error {
		var n T
		if _, err := fmt.Sscan(s, &n); err != nil {
			return fmt.Errorf("not a number: %q", s)
		}
		*dst = n
		return nil
	}
}

// RegistryAuthFlags registers the Schema Registry credential flags.
func RegistryAuthFlags(fs *flag.FlagSet, user, password, passwordFile *string) {
	fs.StringVar(user, "schema-registry-user", *user, "Schema Registry basic-auth user (API key)")
	fs.StringVar(password, "schema-registry-password", *password, "Schema Registry basic-auth password (API secret); prefer the file or KEEPSTATE_SCHEMA_REGISTRY_PASSWORD")
	fs.StringVar(passwordFile, "schema-registry-password-file", *passwordFile, "file holding the Schema Registry password (e.g. a mounted Kubernetes secret)")
}

// ApplyEnv sets every flag of fs that was not given on the command line from
// its environment variable, if that is set.
func ApplyEnv(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		if v, ok := os.LookupEnv(EnvName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", EnvName(f.Name), v, e)
			}
		}
	})
	return err
}

// BrokersFlag registers --brokers, a comma-separated list, into dst.
func BrokersFlag(fs *flag.FlagSet, dst *[]string) {
	fs.Func("brokers", "Kafka bootstrap servers, comma separated (default localhost:9092)", func(s string) error {
		*dst = SplitList(s)
		return nil
	})
}

// SplitList splits a comma-separated list, dropping blanks around and empty
// items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
