package testkit_test

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/internal/testkit"
)

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return addr
}

// partitionCounts creates the topics in create with -1 partitions and
// returns the partition count of every topic in names.
func partitionCounts(t *testing.T, brokers []string, create, names []string) map[string]int {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		t.Fatalf("NewClusterAdmin(%v): %v", brokers, err)
	}
	defer admin.Close()
	for _, n := range create {
		if err := admin.CreateTopic(n, &sarama.TopicDetail{NumPartitions: -1, ReplicationFactor: -1}, false); err != nil {
			t.Fatalf("CreateTopic %s: %v", n, err)
		}
	}
	got := map[string]int{}
	testkit.Eventually(t, 10*time.Second, "topics described", func() error {
		md, err := admin.DescribeTopics(names)
		if err != nil {
			return err
		}
		for _, m := range md {
			if !errors.Is(m.Err, sarama.ErrNoError) {
				return fmt.Errorf("%s: %w", m.Name, m.Err)
			}
			got[m.Name] = len(m.Partitions)
		}
		return nil
	})
	return got
}

func TestStartKfake(t *testing.T) {
	tests := []struct {
		name   string
		opts   []testkit.KfakeOption
		create []string
		want   map[string]int
	}{
		{"default partitions", nil, []string{"created"},
			map[string]int{"created": testkit.DefaultKfakePartitions}},
		{"WithPartitions", []testkit.KfakeOption{testkit.WithPartitions(5)}, []string{"created"},
			map[string]int{"created": 5}},
		{"WithTopics", []testkit.KfakeOption{testkit.WithTopics(2, "a", "b"), testkit.WithTopics(-1, "c")}, nil,
			map[string]int{"a": 2, "b": 2, "c": testkit.DefaultKfakePartitions}},
		{"WithBrokers", []testkit.KfakeOption{testkit.WithBrokers(3), testkit.WithTopics(4, "spread")}, nil,
			map[string]int{"spread": 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := testkit.StartKfake(t, tc.opts...)
			var names []string
			for n := range tc.want {
				names = append(names, n)
			}
			got := partitionCounts(t, k.Brokers(), tc.create, names)
			for n, want := range tc.want {
				if got[n] != want {
					t.Errorf("topic %s: got %d partitions, want %d", n, got[n], want)
				}
			}
		})
	}
}

func TestStartKfakeBrokers(t *testing.T) {
	k := testkit.StartKfake(t, testkit.WithBrokers(3))
	if got := len(k.Brokers()); got != 3 {
		t.Fatalf("Brokers: got %d addresses, want 3", got)
	}
	client, err := sarama.NewClient(k.Brokers()[:1], sarama.NewConfig())
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer client.Close()
	if got := len(client.Brokers()); got != 3 {
		t.Errorf("brokers in metadata: got %d, want 3", got)
	}
}

func TestStartKfakeWithAddr(t *testing.T) {
	addr := freeAddr(t)
	t.Run("listen", func(t *testing.T) {
		k := testkit.StartKfake(t, testkit.WithAddr(addr))
		if got := k.Brokers(); len(got) != 1 || got[0] != addr {
			t.Fatalf("Brokers: got %v, want [%s]", got, addr)
		}
		client, err := sarama.NewClient(k.Brokers(), sarama.NewConfig())
		if err != nil {
			t.Fatalf("NewClient(%s): %v", addr, err)
		}
		defer client.Close()
		bs := client.Brokers()
		if len(bs) != 1 || bs[0].Addr() != addr {
			t.Errorf("advertised brokers: got %d, want one at %s", len(bs), addr)
		}
	})
	// The subtest's cleanup closed the cluster.
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("kfake still listens on %s after cleanup", addr)
	}
}
