package testkit

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kfake is an in-process Kafka cluster (franz-go's kfake) started by
// StartKfake, safe for concurrent use, closed by t.Cleanup.
type Kfake struct {
	cluster *kfake.Cluster
	brokers []string
}

// KfakeOption changes how StartKfake builds the cluster.
type KfakeOption func(*kfakeConfig)

type kfakeConfig struct{ opts []kfake.Opt }

// DefaultKfakePartitions is the partition count of a topic created with -1
// partitions, as num.partitions of the scripts/kafka.sh broker.
const DefaultKfakePartitions = 3

// WithPartitions sets the partition count for topics created without an
// explicit count (default DefaultKfakePartitions).
func WithPartitions(n int) KfakeOption { return WithKfakeOpts(kfake.DefaultNumPartitions(n)) }

// WithTopics creates topics with partitions partitions (< 1: the default)
// before the cluster accepts connections. It may be given several times.
func WithTopics(partitions int32, topics ...string) KfakeOption {
	return WithKfakeOpts(kfake.SeedTopics(partitions, topics...))
}

// WithBrokers sets the number of brokers (default 1).
func WithBrokers(n int) KfakeOption { return WithKfakeOpts(kfake.NumBrokers(n)) }

// WithKfakeOpts passes raw kfake options through, for tests that need
// faults, ACLs or other kfake features.
func WithKfakeOpts(opts ...kfake.Opt) KfakeOption {
	return func(c *kfakeConfig) { c.opts = append(c.opts, opts...) }
}

// StartKfake starts an in-process Kafka cluster on loopback, closed by
// t.Cleanup. Like the real test broker it does not auto-create topics (use
// an admin client or WithTopics) and allows group session timeouts down to
// 1 s.
func StartKfake(t testing.TB, opts ...KfakeOption) *Kfake {
	t.Helper()
	cfg := kfakeConfig{opts: []kfake.Opt{kfake.NumBrokers(1), kfake.DefaultNumPartitions(DefaultKfakePartitions),
		kfake.GroupMinSessionTimeout(time.Second), kfake.ClusterID("keepstate-test")}}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := kfake.NewCluster(cfg.opts...)
	if err != nil {
		t.Fatalf("testkit: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &Kfake{cluster: c, brokers: c.ListenAddrs()}
}

// Brokers returns the bootstrap addresses ("127.0.0.1:PORT").
func (k *Kfake) Brokers() []string { return slices.Clone(k.brokers) }

// Cluster returns the kfake cluster, for control functions and faults.
func (k *Kfake) Cluster() *kfake.Cluster { return k.cluster }
