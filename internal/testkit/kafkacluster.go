//go:build unix

package testkit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// KafkaClusterEnv must be 1 (make integration-cluster) for RealKafkaCluster
// to start a cluster: three JVMs are too heavy for a plain `go test ./...`.
const KafkaClusterEnv = "KEEPSTATE_TEST_KAFKA_CLUSTER"

// clusterNodes is the size of the cluster: a quorum survives one lost node.
const clusterNodes = 3

// KafkaCluster is a three-node Apache Kafka KRaft cluster started by
// scripts/kafka.sh cluster-start: every node is broker and controller, a JVM
// of its own. Topics (the internal ones too) default to replication factor
// 3 and min.insync.replicas 2. Its methods are safe for concurrent use.
type KafkaCluster struct {
	*scriptKafka
	nodes []*KafkaNode
}

// KafkaNode is one node of a KafkaCluster; its ID is the broker and node
// id (1, 2, 3).
type KafkaNode struct {
	ID   int32
	Addr string
	dir  string
	c    *KafkaCluster

	mu     sync.Mutex
	paused bool
}

// RealKafkaCluster returns the cluster this test process shares, started
// on the first call (6-10 s) and stopped by Main (or by the script should
// the process die first). A test that kills, stops or pauses nodes must
// Restore them before it ends. The test is skipped unless
// KEEPSTATE_TEST_KAFKA_CLUSTER=1, and skipped or failed (see Missing)
// without java or the broker jars. `make integration-cluster` runs the
// tests named TestCluster*, which use it, and only those.
func RealKafkaCluster(t testing.TB) *KafkaCluster {
	t.Helper()
	if os.Getenv(KafkaClusterEnv) != "1" {
		t.Skipf("the three-node Kafka cluster tests run with `make integration-cluster` (%s=1)", KafkaClusterEnv)
	}
	return sharedCluster.use(t, "Apache Kafka", func() (*KafkaCluster, string, error) {
		k, missing, err := startScriptKafka("keepstate-kafka-cluster-", "cluster-start", "cluster-stop",
			clusterNodes, strconv.Itoa(clusterNodes))
		if k == nil {
			return nil, missing, err
		}
		c := &KafkaCluster{scriptKafka: k}
		for i, a := range k.brokers {
			dir := filepath.Join(k.dir, "node-"+strconv.Itoa(i+1))
			c.nodes = append(c.nodes, &KafkaNode{ID: int32(i + 1), Addr: a, dir: dir, c: c})
		}
		return c, "", nil
	})
}

// sharedCluster is the cluster RealKafkaCluster starts once per process.
var sharedCluster sharedOnce[*KafkaCluster]

// stopKafkaCluster stops the cluster RealKafkaCluster started, if any, and
// removes its files (keeping the nodes' logs, see keepLog). Main calls it.
func stopKafkaCluster() error {
	err := sharedCluster.stop(errors.New("the cluster was already stopped"), func(c *KafkaCluster) error {
		_, err := runScript(c.script, nil, c.stopCmd, c.dir)
		for _, n := range c.nodes {
			keepLog(filepath.Join(n.dir, "kafka.log"), fmt.Sprintf("kafka-node-%d.log", n.ID))
		}
		return errors.Join(err, os.RemoveAll(c.dir))
	})
	if err != nil {
		return fmt.Errorf("stop the Kafka cluster: %w", err)
	}
	return nil
}

// Brokers returns every node's bootstrap address.
func (c *KafkaCluster) Brokers() []string { return slices.Clone(c.brokers) }

// Nodes returns the nodes, by id.
func (c *KafkaCluster) Nodes() []*KafkaNode { return slices.Clone(c.nodes) }

// Node returns the node with broker id id, or nil.
func (c *KafkaCluster) Node(id int32) *KafkaNode {
	if id < 1 || int(id) > len(c.nodes) {
		return nil
	}
	return c.nodes[id-1]
}

// pid returns the node's JVM process id (0 when it never ran).
func (n *KafkaNode) pid() int {
	b, _ := os.ReadFile(filepath.Join(n.dir, "pid"))
	p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return p
}

// Running reports whether the node's process exists (paused counts).
func (n *KafkaNode) Running() bool { return processAlive(n.pid()) }

// up reports whether the node runs and is not paused.
func (n *KafkaNode) up() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.paused && n.Running()
}

// processAlive reports whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // not Linux: kill -0 is all we know
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// signal sends sig to the node's process.
func (n *KafkaNode) signal(sig syscall.Signal) error {
	p := n.pid()
	if p <= 0 {
		return fmt.Errorf("node %d: no process", n.ID)
	}
	if err := syscall.Kill(p, sig); err != nil {
		return fmt.Errorf("node %d: %v: %w", n.ID, sig, err)
	}
	return nil
}

// waitExit waits up to timeout for the node's process to end.
func (n *KafkaNode) waitExit(timeout time.Duration) error {
	p := n.pid()
	deadline := time.Now().Add(timeout)
	for processAlive(p) {
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d (pid %d) still runs after %v", n.ID, p, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// Kill kills the node with SIGKILL and waits until its process is gone.
func (n *KafkaNode) Kill() error {
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
	if err := n.signal(syscall.SIGKILL); err != nil {
		return err
	}
	return n.waitExit(10 * time.Second)
}

// Stop sends SIGTERM (a controlled shutdown: the node hands its leaderships
// over first) and waits up to timeout for the exit, then kills it.
func (n *KafkaNode) Stop(timeout time.Duration) error {
	if err := n.Resume(); err != nil {
		return err
	}
	if err := n.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := n.waitExit(timeout); err != nil {
		_ = n.Kill()
		return err
	}
	return nil
}

// Pause stops the node's process with SIGSTOP: its connections stay open
// but nothing answers.
func (n *KafkaNode) Pause() error { return n.pause(true, syscall.SIGSTOP) }

// Resume continues a paused node (SIGCONT); a no-op when it is not paused.
func (n *KafkaNode) Resume() error { return n.pause(false, syscall.SIGCONT) }

// pause sends sig and records whether the node is paused; it does nothing
// to resume a node that is not paused.
func (n *KafkaNode) pause(paused bool, sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !paused && !n.paused {
		return nil
	}
	err := n.signal(sig)
	if err == nil {
		n.paused = paused
	}
	return err
}

// Start starts a killed or stopped node again on its ports and data and
// waits until it serves (scripts/kafka.sh node-start, up to 60 s).
func (n *KafkaNode) Start() error {
	if n.Running() {
		return fmt.Errorf("node %d already runs", n.ID)
	}
	_, err := runScript(n.c.script, ownerEnv(os.Getpid()), "node-start", n.dir)
	return err
}

// Restore resumes and starts every node and waits up to timeout until
// InSync holds. Call it at the end of a test that injected faults.
func (c *KafkaCluster) Restore(t testing.TB, timeout time.Duration) {
	t.Helper()
	for _, n := range c.nodes {
		if err := n.Resume(); err != nil {
			t.Errorf("testkit: %v", err)
		}
		if !n.Running() {
			if err := n.Start(); err != nil {
				t.Fatalf("testkit: restart node %d: %v", n.ID, err)
			}
		}
	}
	Eventually(t, timeout, "every partition fully in sync", c.InSync)
}

// InSync returns nil when every node is up and every partition of every
// topic (internal ones too) has all its replicas in sync, or else an error
// naming one that has not.
func (c *KafkaCluster) InSync() error {
	for _, n := range c.nodes {
		if !n.up() {
			return fmt.Errorf("node %d is down", n.ID)
		}
	}
	return c.withClient(func(cl sarama.Client) error {
		if err := cl.RefreshMetadata(); err != nil {
			return err
		}
		if got := len(cl.Brokers()); got != len(c.nodes) {
			return fmt.Errorf("%d of %d brokers registered", got, len(c.nodes))
		}
		topics, err := cl.Topics()
		if err != nil {
			return err
		}
		for _, tp := range topics {
			ps, err := cl.Partitions(tp)
			if err != nil {
				return err
			}
			for _, p := range ps {
				isr, err := cl.InSyncReplicas(tp, p)
				if err != nil {
					return err
				}
				reps, err := cl.Replicas(tp, p)
				if err != nil {
					return err
				}
				if len(isr) < len(reps) {
					return fmt.Errorf("%s/%d: in sync %v of %v", tp, p, isr, reps)
				}
			}
		}
		return nil
	})
}

// Leader returns the node leading topic/p, as the metadata says now.
func (c *KafkaCluster) Leader(topic string, p int32) (*KafkaNode, error) {
	return c.nodeOf(func(cl sarama.Client) (*sarama.Broker, error) {
		if err := cl.RefreshMetadata(topic); err != nil {
			return nil, err
		}
		return cl.Leader(topic, p)
	})
}

// TxnCoordinator returns the node coordinating transactional id txnID.
func (c *KafkaCluster) TxnCoordinator(txnID string) (*KafkaNode, error) {
	return c.nodeOf(func(cl sarama.Client) (*sarama.Broker, error) { return cl.TransactionCoordinator(txnID) })
}

// GroupCoordinator returns the node coordinating consumer group group.
func (c *KafkaCluster) GroupCoordinator(group string) (*KafkaNode, error) {
	return c.nodeOf(func(cl sarama.Client) (*sarama.Broker, error) { return cl.Coordinator(group) })
}

// nodeOf returns the node of the broker find picks with a fresh client.
func (c *KafkaCluster) nodeOf(find func(sarama.Client) (*sarama.Broker, error)) (*KafkaNode, error) {
	var id int32
	err := c.withClient(func(cl sarama.Client) error {
		b, err := find(cl)
		if err == nil {
			id = b.ID()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if n := c.Node(id); n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("broker id %d is no node of the cluster", id)
}

// withClient runs fn with a fresh client bootstrapped from the running
// nodes (a cached one would answer from stale metadata).
func (c *KafkaCluster) withClient(fn func(sarama.Client) error) error {
	var addrs []string
	for _, n := range c.nodes {
		if n.up() {
			addrs = append(addrs, n.Addr)
		}
	}
	if len(addrs) == 0 {
		return errors.New("no node runs")
	}
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	sc.Net.DialTimeout, sc.Net.ReadTimeout = 2*time.Second, 5*time.Second
	sc.Metadata.Retry.Max, sc.Metadata.Retry.Backoff = 1, 100*time.Millisecond
	cl, err := sarama.NewClient(addrs, sc)
	if err != nil {
		return err
	}
	defer cl.Close()
	return fn(cl)
}
