package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisToolsInstall says how to get redis-cli, which creates a cluster.
const RedisToolsInstall = "apt-get install redis-tools"

// RedisCluster is a real Redis Cluster on loopback ports: three masters
// with one replica each, created by redis-cli --cluster create. A node
// fails over to its replica RedisClusterNodeTimeout after it stops
// answering (cluster-replica-validity-factor 0: a replica that lagged
// still takes over). Its methods return errors instead of failing a test.
type RedisCluster struct {
	// Nodes are the six servers in creation order; which of them are
	// masters changes with failovers (see Masters).
	Nodes  []*Redis
	dir    string
	ownDir bool
}

// RedisClusterNodeTimeout is the cluster-node-timeout of a test cluster.
const RedisClusterNodeTimeout = 2 * time.Second

// StartRedisCluster starts a cluster for the test and stops it when the
// test ends; tests that kill or move nodes use their own. When redis-server
// or redis-cli is missing the test is skipped (or fails when
// KEEPSTATE_REQUIRE_SERVICES=1).
func StartRedisCluster(t testing.TB, opts ...RedisOption) *RedisCluster {
	t.Helper()
	LookPath(t, "redis-server", RedisInstall)
	LookPath(t, "redis-cli", RedisToolsInstall)
	c, err := launchRedisCluster(t.TempDir(), false, opts)
	if err != nil {
		t.Fatalf("start redis cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("stop redis cluster: %v", err)
		}
	})
	return c
}

// SharedRedisCluster returns the cluster shared by every test of the
// process, started on the first call and stopped by Main (or
// StopSharedRedis). Tests must not stop its nodes and should keep their
// keys under a prefix of their own.
func SharedRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	LookPath(t, "redis-server", RedisInstall)
	LookPath(t, "redis-cli", RedisToolsInstall)
	sharedRedis.mu.Lock()
	defer sharedRedis.mu.Unlock()
	if sharedRedis.stopped {
		t.Fatal("testkit: the shared redis cluster was stopped")
	}
	if sharedRedis.cluster == nil && sharedRedis.clusterErr == nil {
		dir, err := os.MkdirTemp("", "keepstate-redis-cluster-")
		if err == nil {
			sharedRedis.cluster, err = launchRedisCluster(dir, true, nil)
			if err != nil {
				_ = os.RemoveAll(dir)
			}
		}
		sharedRedis.clusterErr = err
	}
	if sharedRedis.clusterErr != nil {
		t.Fatalf("testkit: start the shared redis cluster: %v", sharedRedis.clusterErr)
	}
	return sharedRedis.cluster
}

// sharedRedis holds the cluster and Sentinel setup shared by a test process.
var sharedRedis struct {
	mu          sync.Mutex
	stopped     bool
	cluster     *RedisCluster
	clusterErr  error
	sentinel    *RedisSentinel
	sentinelErr error
}

// StopSharedRedis stops the shared cluster and Sentinel setup, if started;
// Main calls it. Later SharedRedisCluster and SharedRedisSentinel calls
// fail the test.
func StopSharedRedis() error {
	sharedRedis.mu.Lock()
	defer sharedRedis.mu.Unlock()
	sharedRedis.stopped = true
	var errs []error
	if c := sharedRedis.cluster; c != nil {
		errs = append(errs, c.Close())
	}
	if s := sharedRedis.sentinel; s != nil {
		errs = append(errs, s.Close())
	}
	sharedRedis.cluster, sharedRedis.sentinel = nil, nil
	return errors.Join(errs...)
}

func launchRedisCluster(dir string, ownDir bool, opts []RedisOption) (*RedisCluster, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrRedisMissing
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli not found on PATH (%s)", RedisToolsInstall)
	}
	c := &RedisCluster{dir: dir, ownDir: ownDir}
	nodeOpts := append([]RedisOption{WithRedisArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(RedisClusterNodeTimeout.Milliseconds(), 10),
		"--cluster-replica-validity-factor", "0", "--cluster-require-full-coverage", "yes",
		// A master stopped with SIGTERM exits at once instead of waiting
		// up to 10 s for a replica that is gone.
		"--shutdown-on-sigterm", "now")}, opts...)
	addrs := make([]string, 0, 6)
	for i := range 6 {
		nd := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(nd, 0o755); err != nil {
			_ = c.Close()
			return nil, err
		}
		r, err := newRedis(bin, nd, false, nodeOpts)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, r)
		addrs = append(addrs, r.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if pw := c.Nodes[0].Password(); pw != "" {
		args = append([]string{"-a", pw, "--no-auth-warning"}, args...)
	}
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		_ = c.Close()
		return nil, err
	}
	if err := c.WaitReplicas(30 * time.Second); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// WaitReplicas waits until every running node that is a replica has its
// link to its master up (INFO replication), and every master serving
// slots has a running replica. Call it after WaitHealthy.
func (c *RedisCluster) WaitReplicas(within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last error
	for {
		if last = c.replicated(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis cluster replicas not in sync within %v: %w", within, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *RedisCluster) replicated(ctx context.Context) error {
	n, err := c.anyRunning()
	if err != nil {
		return err
	}
	view, err := c.View(ctx, n)
	if err != nil {
		return err
	}
	for _, m := range view {
		if !m.Has("master") || m.Has("fail") || len(m.Slots) == 0 {
			continue
		}
		ok := false
		for _, r := range view {
			node := c.Node(r.Addr)
			if r.MasterID != m.ID || node == nil || !node.Running() {
				continue
			}
			cl := c.client(node)
			info, err := cl.Info(ctx, "replication").Result()
			_ = cl.Close()
			if err != nil {
				return fmt.Errorf("replica %s: %w", r.Addr, err)
			}
			if strings.Contains(info, "master_link_status:up") {
				ok = true
			}
		}
		if !ok {
			return fmt.Errorf("master %s has no replica in sync", m.Addr)
		}
	}
	return nil
}

// URL returns the cluster's URL in go-redis's form (redis.ParseClusterURL):
// redis://[:password@]node0?addr=node1&addr=node2...
func (c *RedisCluster) URL() string {
	var b strings.Builder
	b.WriteString("redis://")
	if pw := c.Nodes[0].Password(); pw != "" {
		b.WriteString(":" + pw + "@")
	}
	b.WriteString(c.Nodes[0].Addr())
	for i, n := range c.Nodes[1:] {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString("addr=" + n.Addr())
	}
	return b.String()
}

// Node returns the node listening on addr, or nil.
func (c *RedisCluster) Node(addr string) *Redis {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// client returns a go-redis client of one node; the caller closes it.
func (c *RedisCluster) client(n *Redis) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.Addr(), Password: n.Password(), MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
}

// Do runs one command on node n and returns its reply.
func (c *RedisCluster) Do(ctx context.Context, n *Redis, args ...any) (any, error) {
	cl := c.client(n)
	defer cl.Close()
	return cl.Do(ctx, args...).Result()
}

// RedisClusterNode is one line of CLUSTER NODES.
type RedisClusterNode struct {
	ID, Addr, MasterID string
	Flags              []string
	Slots              []string // ranges "0-5460", single slots, migrations
}

// Has reports whether the node carries flag (master, slave, fail, ...).
func (n RedisClusterNode) Has(flag string) bool {
	for _, f := range n.Flags {
		if f == flag || f == flag+"?" {
			return true
		}
	}
	return false
}

// ServesSlot reports whether the node's slot ranges include slot.
func (n RedisClusterNode) ServesSlot(slot int) bool {
	for _, r := range n.Slots {
		if strings.HasPrefix(r, "[") {
			continue // a slot being imported or migrated
		}
		lo, hi, ok := strings.Cut(r, "-")
		if !ok {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && a <= slot && slot <= b {
			return true
		}
	}
	return false
}

// View returns the cluster as node n sees it (CLUSTER NODES).
func (c *RedisCluster) View(ctx context.Context, n *Redis) ([]RedisClusterNode, error) {
	cl := c.client(n)
	defer cl.Close()
	text, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []RedisClusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		nd := RedisClusterNode{ID: f[0], Addr: addr, Flags: strings.Split(f[2], ","), Slots: f[8:]}
		if f[3] != "-" {
			nd.MasterID = f[3]
		}
		out = append(out, nd)
	}
	return out, nil
}

// anyRunning returns a running node.
func (c *RedisCluster) anyRunning() (*Redis, error) {
	for _, n := range c.Nodes {
		if n.Running() {
			return n, nil
		}
	}
	return nil, errors.New("no cluster node is running")
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT).
func (c *RedisCluster) Slot(ctx context.Context, key string) (int, error) {
	n, err := c.anyRunning()
	if err != nil {
		return 0, err
	}
	cl := c.client(n)
	defer cl.Close()
	s, err := cl.ClusterKeySlot(ctx, key).Result()
	return int(s), err
}

// MasterOf returns the master serving slot and its replicas (as a running
// node sees the cluster).
func (c *RedisCluster) MasterOf(ctx context.Context, slot int) (master *Redis, replicas []*Redis, err error) {
	n, err := c.anyRunning()
	if err != nil {
		return nil, nil, err
	}
	view, err := c.View(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	var id string
	for _, v := range view {
		if v.Has("master") && !v.Has("fail") && v.ServesSlot(slot) {
			id, master = v.ID, c.Node(v.Addr)
		}
	}
	if master == nil {
		return nil, nil, fmt.Errorf("no master serves slot %d", slot)
	}
	for _, v := range view {
		if v.MasterID == id {
			if r := c.Node(v.Addr); r != nil {
				replicas = append(replicas, r)
			}
		}
	}
	return master, replicas, nil
}

// WaitHealthy waits until every running node reports cluster_state:ok with
// all 16384 slots served, and sees every stopped node as failed, so that a
// failover has finished.
func (c *RedisCluster) WaitHealthy(within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last error
	for {
		if last = c.healthy(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis cluster not healthy within %v: %w", within, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *RedisCluster) healthy(ctx context.Context) error {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := c.client(n)
		info, err := cl.ClusterInfo(ctx).Result()
		_ = cl.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Addr(), err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return fmt.Errorf("node %s: not ok: %s", n.Addr(), strings.Join(strings.Fields(info)[:4], " "))
		}
		view, err := c.View(ctx, n)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Addr(), err)
		}
		for _, v := range view {
			other := c.Node(v.Addr)
			if other == nil {
				continue
			}
			if !other.Running() && !v.Has("fail") {
				return fmt.Errorf("node %s does not see the stopped node %s as failed", n.Addr(), v.Addr)
			}
			if other.Running() && (v.Has("fail") || strings.Contains(strings.Join(v.Flags, ","), "fail?")) {
				return fmt.Errorf("node %s sees the running node %s as failed", n.Addr(), v.Addr)
			}
			if v.Has("master") && !v.Has("fail") && !other.Running() {
				return fmt.Errorf("stopped node %s is still a master", v.Addr)
			}
		}
	}
	return nil
}

// Close stops every node with SIGKILL and removes a shared cluster's
// directory. A closed cluster's data is thrown away, so a clean shutdown
// would only add time: under a loaded CI a node once took more than 10 s
// to exit after SIGTERM, and the cleanup failed its test.
func (c *RedisCluster) Close() error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Kill())
		if n.ownDir {
			errs = append(errs, os.RemoveAll(n.dir))
		}
	}
	if c.ownDir {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}
