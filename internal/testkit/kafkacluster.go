//go:build unix

package testkit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// KafkaClusterEnv must be 1 for RealKafkaCluster to start a cluster; the
// Makefile's integration-cluster target sets it. Without it the tests that
// need the cluster are skipped: three JVMs are too heavy for a plain
// `go test ./...`.
const KafkaClusterEnv = "KEEPSTATE_TEST_KAFKA_CLUSTER"

// clusterNodes is the size of the cluster RealKafkaCluster starts: three
// voters, so that a quorum survives one lost node.
const clusterNodes = 3

// KafkaCluster is a three-node Apache Kafka KRaft cluster started by
// scripts/kafka.sh cluster-start: every node is broker and controller, its
// own JVM with its own ports and log dir. Topics default to replication
// factor 3 and min.insync.replicas 2, as do the offsets and transaction
// state topics. Its methods are safe for concurrent use.
type KafkaCluster struct {
	script string
	dir    string
	nodes  []*KafkaNode
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

// RealKafkaCluster returns the three-node cluster of this test process,
// starting it on the first call (about 6-10 s) and sharing it with every
// later caller; Main stops it when the tests end (and the script stops it
// on its own should the process die first). A test that kills, stops or
// pauses nodes must leave them all running again (Restore) before it ends,
// since later tests share the cluster. The test is skipped unless
// KEEPSTATE_TEST_KAFKA_CLUSTER=1, and skipped or failed (see Missing)
// without java or the broker jars. Name tests that use it TestCluster*:
// `make integration-cluster` runs those, and only those.
func RealKafkaCluster(t testing.TB) *KafkaCluster {
	t.Helper()
	if os.Getenv(KafkaClusterEnv) != "1" {
		t.Skipf("the three-node Kafka cluster tests run with `make integration-cluster` (%s=1)", KafkaClusterEnv)
	}
	c, missing, err := sharedCluster.get(startKafkaCluster)
	if missing != "" {
		Missing(t, "Apache Kafka", missing)
	}
	if err != nil {
		t.Fatalf("testkit: start the Kafka cluster: %v", err)
	}
	return c
}

// sharedCluster is the cluster RealKafkaCluster starts once per process.
var sharedCluster sharedOnce[*KafkaCluster]

// startKafkaCluster starts the cluster RealKafkaCluster shares. The second
// result says why it cannot run here, for Missing.
func startKafkaCluster() (*KafkaCluster, string, error) {
	script, missing := findScript()
	if missing == "" {
		missing = checkScript(script)
	}
	if missing != "" {
		return nil, missing, nil
	}
	dir, err := os.MkdirTemp("", "keepstate-kafka-cluster-")
	if err != nil {
		return nil, "", fmt.Errorf("temp dir: %w", err)
	}
	owner := []string{"KEEPSTATE_KAFKA_OWNER_PID=" + strconv.Itoa(os.Getpid())}
	out, err := runScript(script, owner, "cluster-start", dir, strconv.Itoa(clusterNodes))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	addrs := splitBrokers(lines[len(lines)-1])
	if len(addrs) != clusterNodes {
		return nil, "", fmt.Errorf("kafka.sh cluster-start printed %q, want %d brokers", out, clusterNodes)
	}
	c := &KafkaCluster{script: script, dir: dir}
	for i, a := range addrs {
		c.nodes = append(c.nodes, &KafkaNode{ID: int32(i + 1), Addr: a, dir: filepath.Join(dir, "node-"+strconv.Itoa(i+1)), c: c})
	}
	return c, "", nil
}

// stopKafkaCluster stops the cluster RealKafkaCluster started, if any, and
// removes its files. Main calls it.
func stopKafkaCluster() error {
	return sharedCluster.stop(errors.New("the cluster was already stopped"), func(c *KafkaCluster) error {
		_, err := runScript(c.script, nil, "cluster-stop", c.dir)
		for _, n := range c.nodes {
			keepLog(filepath.Join(n.dir, "kafka.log"), fmt.Sprintf("kafka-node-%d.log", n.ID))
		}
		if rmErr := os.RemoveAll(c.dir); err == nil && rmErr != nil {
			err = rmErr
		}
		return err
	})
}

// Brokers returns every node's bootstrap address.
func (c *KafkaCluster) Brokers() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr
	}
	return out
}

// Nodes returns the nodes, by id.
func (c *KafkaCluster) Nodes() []*KafkaNode { return append([]*KafkaNode(nil), c.nodes...) }

// Node returns the node with broker id id, or nil.
func (c *KafkaCluster) Node(id int32) *KafkaNode {
	if id < 1 || int(id) > len(c.nodes) {
		return nil
	}
	return c.nodes[id-1]
}

// pid returns the node's JVM process id (0 when it never ran).
func (n *KafkaNode) pid() int {
	b, err := os.ReadFile(filepath.Join(n.dir, "pid"))
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return p
}

// Running reports whether the node's process exists (paused counts).
func (n *KafkaNode) Running() bool {
	p := n.pid()
	return p > 0 && processAlive(p)
}

// up reports whether the node runs and is not paused.
func (n *KafkaNode) up() bool {
	n.mu.Lock()
	paused := n.paused
	n.mu.Unlock()
	return !paused && n.Running()
}

// processAlive reports whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // not Linux: kill -0 is all we know
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
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
	for p > 0 && processAlive(p) {
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
// over first) and waits up to timeout for the process to end, killing it
// after that.
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
func (n *KafkaNode) Pause() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	n.paused = true
	return nil
}

// Resume continues a paused node (SIGCONT); a no-op when it is not paused.
func (n *KafkaNode) Resume() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.paused {
		return nil
	}
	if err := n.signal(syscall.SIGCONT); err != nil {
		return err
	}
	n.paused = false
	return nil
}

// Start starts a killed or stopped node again on its ports and data and
// waits until it serves (scripts/kafka.sh node-start, up to 60 s).
func (n *KafkaNode) Start() error {
	if n.Running() {
		return fmt.Errorf("node %d already runs", n.ID)
	}
	owner := []string{"KEEPSTATE_KAFKA_OWNER_PID=" + strconv.Itoa(os.Getpid())}
	_, err := runScript(n.c.script, owner, "node-start", n.dir)
	return err
}

// Restore brings every node back (resumed, started) and waits up to
// timeout until every partition of every topic has its full set of
// in-sync replicas. Call it at the end of a test that injected faults.
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
// topic (the internal ones too) has all its replicas in sync, and
// otherwise an error naming one that has not.
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

// Leader returns the node leading topic/p, as the cluster's metadata says
// now.
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
	sc.Net.DialTimeout = 2 * time.Second
	sc.Net.ReadTimeout = 5 * time.Second
	sc.Metadata.Retry.Max = 1
	sc.Metadata.Retry.Backoff = 100 * time.Millisecond
	cl, err := sarama.NewClient(addrs, sc)
	if err != nil {
		return err
	}
	defer cl.Close()
	return fn(cl)
}
