package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisToolsInstall says how to get redis-cli, which creates a cluster.
const RedisToolsInstall = "apt-get install redis-tools"

// RedisCluster is a real Redis Cluster on loopback ports: three masters with
// a replica each, which takes over (even lagging) RedisClusterNodeTimeout
// after its master stops answering. Its methods return errors.
type RedisCluster struct {
	// Nodes are the six servers in creation order; failovers change which
	// are masters (see MasterOf).
	Nodes []*Redis
	redisGroup
}

// RedisClusterNodeTimeout is the cluster-node-timeout of a test cluster.
const RedisClusterNodeTimeout = 2 * time.Second

// StartRedisCluster starts a cluster for a test that kills or moves nodes,
// and stops it when the test ends. Without redis-server or redis-cli the
// test is skipped (see Missing).
func StartRedisCluster(t testing.TB, opts ...RedisOption) *RedisCluster {
	t.Helper()
	LookPath(t, "redis-server", RedisInstall)
	LookPath(t, "redis-cli", RedisToolsInstall)
	c, err := launchRedisCluster(opts)
	return closeAtEnd(t, "redis cluster", c, err)
}

// SharedRedisCluster returns the cluster every test of the process shares,
// started on first use and stopped by Main (StopSharedRedis). Tests must
// not stop its nodes and should keep their keys under their own prefix.
func SharedRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	LookPath(t, "redis-server", RedisInstall)
	LookPath(t, "redis-cli", RedisToolsInstall)
	return sharedRedisCluster.use(t, "the shared redis cluster", func() (*RedisCluster, string, error) {
		c, err := launchRedisCluster(nil)
		return c, "", err
	})
}

// The cluster and Sentinel setup shared by a test process.
var (
	sharedRedisCluster  sharedOnce[*RedisCluster]
	sharedRedisSentinel sharedOnce[*RedisSentinel]
)

// StopSharedRedis stops the shared cluster and Sentinel setup, if started;
// later calls for them fail the test. Main calls it.
func StopSharedRedis() error {
	return errors.Join(
		sharedRedisCluster.stop(errors.New("the shared redis cluster was stopped"), (*RedisCluster).Close),
		sharedRedisSentinel.stop(errors.New("the shared redis sentinel setup was stopped"), (*RedisSentinel).Close))
}

// closeAtEnd fails t when what did not start (err), and otherwise closes v
// when the test ends.
func closeAtEnd[T interface{ Close() error }](t testing.TB, what string, v T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Errorf("stop %s: %v", what, err)
		}
	})
	return v
}

// redisGroup is the redis-server binary, the temporary directory and the
// servers of a cluster or Sentinel setup.
type redisGroup struct {
	bin, dir string
	all      []*Redis
}

// newRedisGroup finds redis-server and makes the directory of a setup.
func newRedisGroup(prefix string) (redisGroup, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return redisGroup{}, ErrRedisMissing
	}
	dir, err := os.MkdirTemp("", prefix)
	return redisGroup{bin: bin, dir: dir}, err
}

// startNode starts a redis-server in the subdirectory name; with a conf
// (a Sentinel's, which the Sentinel rewrites) in a config file of its own.
func (g *redisGroup) startNode(name, conf string, cfg redisConfig) (*Redis, error) {
	d := filepath.Join(g.dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	if conf != "" {
		cfg.conf = filepath.Join(d, "sentinel.conf")
		if err := os.WriteFile(cfg.conf, []byte(conf), 0o644); err != nil {
			return nil, err
		}
	}
	r, err := newRedis(g.bin, d, false, cfg)
	if err == nil {
		g.all = append(g.all, r)
	}
	return r, err
}

// close stops the servers, last started first, and removes the directory.
func (g *redisGroup) close(stop func(*Redis) error) error {
	var errs []error
	for _, r := range slices.Backward(g.all) {
		errs = append(errs, stop(r))
	}
	return errors.Join(append(errs, os.RemoveAll(g.dir))...)
}

// waitCtx calls check every 100ms, with a context that ends after within,
// until it returns nil, or else returns "<what> within <within>: <error>".
func waitCtx(within time.Duration, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		last := check(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s within %v: %w", what, within, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// launchRedisCluster starts a cluster in a temporary directory that Close
// removes.
func launchRedisCluster(opts []RedisOption) (_ *RedisCluster, err error) {
	g, err := newRedisGroup("keepstate-redis-cluster-")
	if err != nil {
		return nil, err
	}
	c := &RedisCluster{redisGroup: g}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli not found on PATH (%s)", RedisToolsInstall)
	}
	cfg := redisOptions(opts)
	cfg.args = append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(RedisClusterNodeTimeout.Milliseconds(), 10),
		"--cluster-replica-validity-factor", "0", "--cluster-require-full-coverage", "yes",
		// A master stopped with SIGTERM exits at once instead of waiting
		// up to 10 s for a replica that is gone.
		"--shutdown-on-sigterm", "now"}, cfg.args...)
	args := []string{"--cluster", "create"}
	for i := range 6 {
		r, err := c.startNode("node"+strconv.Itoa(i), "", cfg)
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, r)
		args = append(args, r.Addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if pw := cfg.password; pw != "" {
		args = append([]string{"-a", pw, "--no-auth-warning"}, args...)
	}
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		return nil, err
	}
	if err := c.WaitReplicas(30 * time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// WaitReplicas waits until every master serving slots has a running
// replica whose link to it is up. Call it after WaitHealthy.
func (c *RedisCluster) WaitReplicas(within time.Duration) error {
	return waitCtx(within, "redis cluster replicas not in sync", c.replicated)
}

func (c *RedisCluster) replicated(ctx context.Context) error {
	view, err := c.view(ctx)
	if err != nil {
		return err
	}
	for _, m := range view {
		if !m.Has("master") || m.Has("fail") || len(m.Slots) == 0 {
			continue
		}
		ok := false
		for _, r := range view {
			if node := c.Node(r.Addr); r.MasterID == m.ID && node != nil && node.Running() {
				info, err := onNode(node, func(cl *redis.Client) (string, error) {
					return cl.Info(ctx, "replication").Result()
				})
				if err != nil {
					return fmt.Errorf("replica %s: %w", r.Addr, err)
				}
				ok = ok || strings.Contains(info, "master_link_status:up")
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
	u := "redis://"
	if pw := c.Nodes[0].Password(); pw != "" {
		u += ":" + pw + "@"
	}
	var q []string
	for _, n := range c.Nodes[1:] {
		q = append(q, "addr="+n.Addr())
	}
	return u + c.Nodes[0].Addr() + "?" + strings.Join(q, "&")
}

// Node returns the node listening on addr, or nil.
func (c *RedisCluster) Node(addr string) *Redis { return byAddr(c.Nodes, addr) }

// byAddr returns the server of rs listening on addr, or nil.
func byAddr(rs []*Redis, addr string) *Redis {
	if i := slices.IndexFunc(rs, func(r *Redis) bool { return r.Addr() == addr }); i >= 0 {
		return rs[i]
	}
	return nil
}

// onNode calls f with a go-redis client of node n.
func onNode[T any](n *Redis, f func(*redis.Client) (T, error)) (T, error) {
	cl := redis.NewClient(&redis.Options{Addr: n.Addr(), Password: n.Password(), MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	defer cl.Close()
	return f(cl)
}

// Do runs one command on node n and returns its reply.
func (c *RedisCluster) Do(ctx context.Context, n *Redis, args ...any) (any, error) {
	return onNode(n, func(cl *redis.Client) (any, error) { return cl.Do(ctx, args...).Result() })
}

// RedisClusterNode is one line of CLUSTER NODES.
type RedisClusterNode struct {
	ID, Addr, MasterID string
	Flags              []string
	Slots              []string // ranges "0-5460", single slots, migrations
}

// Has reports whether the node carries flag (master, slave, fail, ...)
// exactly: "fail" is agreed on, "fail?" one node's suspicion.
func (n RedisClusterNode) Has(flag string) bool { return slices.Contains(n.Flags, flag) }

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
	text, err := onNode(n, func(cl *redis.Client) (string, error) { return cl.ClusterNodes(ctx).Result() })
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
	if i := slices.IndexFunc(c.Nodes, (*Redis).Running); i >= 0 {
		return c.Nodes[i], nil
	}
	return nil, errors.New("no cluster node is running")
}

// view returns the cluster as a running node sees it.
func (c *RedisCluster) view(ctx context.Context) ([]RedisClusterNode, error) {
	n, err := c.anyRunning()
	if err != nil {
		return nil, err
	}
	return c.View(ctx, n)
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT).
func (c *RedisCluster) Slot(ctx context.Context, key string) (int, error) {
	n, err := c.anyRunning()
	if err != nil {
		return 0, err
	}
	s, err := onNode(n, func(cl *redis.Client) (int64, error) { return cl.ClusterKeySlot(ctx, key).Result() })
	return int(s), err
}

// MasterOf returns the master serving slot and its replicas (as a running
// node sees the cluster).
func (c *RedisCluster) MasterOf(ctx context.Context, slot int) (master *Redis, replicas []*Redis, err error) {
	view, err := c.view(ctx)
	if err != nil {
		return nil, nil, err
	}
	var id string
	for _, v := range view {
		if v.Has("master") && !v.Has("fail") && !v.Has("fail?") && v.ServesSlot(slot) {
			id, master = v.ID, c.Node(v.Addr)
		}
	}
	if master == nil {
		return nil, nil, fmt.Errorf("no master serves slot %d", slot)
	}
	for _, v := range view {
		if r := c.Node(v.Addr); v.MasterID == id && r != nil {
			replicas = append(replicas, r)
		}
	}
	return master, replicas, nil
}

// WaitHealthy waits until every running node reports cluster_state:ok with
// all 16384 slots served and sees every stopped node as failed: until a
// failover has finished.
func (c *RedisCluster) WaitHealthy(within time.Duration) error {
	return waitCtx(within, "redis cluster not healthy", c.healthy)
}

func (c *RedisCluster) healthy(ctx context.Context) error {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		info, err := onNode(n, func(cl *redis.Client) (string, error) { return cl.ClusterInfo(ctx).Result() })
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
			if up := other.Running(); !up && !v.Has("fail") {
				return fmt.Errorf("node %s does not see the stopped node %s as failed", n.Addr(), v.Addr)
			} else if up && (v.Has("fail") || v.Has("fail?")) {
				return fmt.Errorf("node %s sees the running node %s as failed", n.Addr(), v.Addr)
			}
		}
	}
	return nil
}

// Close kills every node (SIGKILL) and removes the directory: a clean
// shutdown of data thrown away only adds time, once over 10 s on a loaded
// CI, failing the cleanup.
func (c *RedisCluster) Close() error { return c.close((*Redis).Kill) }
