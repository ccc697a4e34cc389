package testkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisSentinelMaster is the master name of a test Sentinel setup.
const RedisSentinelMaster = "keepstate"

// RedisSentinelDownAfter is how long the test Sentinels wait before they
// consider a silent master down.
const RedisSentinelDownAfter = 2 * time.Second

// RedisSentinel is a real Sentinel setup on loopback ports: a master, one
// replica and three Sentinels (quorum 2) watching them. Which server is the
// master changes with failovers (see Master). Its methods return errors
// instead of failing a test.
type RedisSentinel struct {
	// Servers are the master and the replica in creation order.
	Servers   []*Redis
	Sentinels []*Redis
	dir       string
	ownDir    bool
}

// StartRedisSentinel starts a Sentinel setup for the test and stops it when
// the test ends. When redis-server is missing the test is skipped (or fails
// when KEEPSTATE_REQUIRE_SERVICES=1).
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	LookPath(t, "redis-server", RedisInstall)
	s, err := launchRedisSentinel(t.TempDir())
	if err != nil {
		t.Fatalf("start redis sentinel setup: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("stop redis sentinel setup: %v", err)
		}
	})
	return s
}

// SharedRedisSentinel returns the Sentinel setup shared by every test of
// the process, started on the first call and stopped by Main (or
// StopSharedRedis). Tests must not stop its servers and should keep their
// keys under a prefix of their own.
func SharedRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	LookPath(t, "redis-server", RedisInstall)
	s, _, err := sharedRedisSentinel.get(func() (*RedisSentinel, string, error) {
		s, err := launchRedisSentinel("")
		return s, "", err
	})
	if err != nil {
		t.Fatalf("testkit: start the shared redis sentinel setup: %v", err)
	}
	return s
}

// launchRedisSentinel starts a setup in dir, or in a temporary directory
// that Close removes when dir is "".
func launchRedisSentinel(dir string) (_ *RedisSentinel, err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrRedisMissing
	}
	s := &RedisSentinel{dir: dir}
	if dir == "" {
		if s.dir, err = os.MkdirTemp("", "keepstate-redis-sentinel-"); err != nil {
			return nil, err
		}
		s.ownDir = true
	}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	// A master stopped with SIGTERM exits at once instead of waiting up to
	// 10 s for a replica that is gone.
	now := WithRedisArgs("--shutdown-on-sigterm", "now")
	master, err := startNode(bin, s.dir, "server0", now)
	if err != nil {
		return nil, err
	}
	s.Servers = append(s.Servers, master)
	replica, err := startNode(bin, s.dir, "server1", now, WithRedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	if err != nil {
		return nil, err
	}
	s.Servers = append(s.Servers, replica)
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 10000\n",
		RedisSentinelMaster, master.Port(), RedisSentinelMaster, RedisSentinelDownAfter.Milliseconds(), RedisSentinelMaster)
	for i := range 3 {
		// Each Sentinel rewrites its own copy of the config file.
		d := filepath.Join(s.dir, "sentinel"+strconv.Itoa(i))
		file := filepath.Join(d, "sentinel.conf")
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		sn, err := newRedis(bin, d, false, []RedisOption{func(c *redisConfig) {
			c.conf = file
			c.args = append(c.args, "--sentinel")
		}})
		if err != nil {
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, sn)
	}
	if err := s.WaitReady(30 * time.Second); err != nil {
		return nil, err
	}
	return s, nil
}

// URL returns the setup's URL in go-redis's form (redis.ParseFailoverURL):
// redis://sentinel0?addr=sentinel1&addr=sentinel2&master_name=keepstate.
func (s *RedisSentinel) URL() string {
	u := "redis://" + s.Sentinels[0].Addr() + "?"
	for _, n := range s.Sentinels[1:] {
		u += "addr=" + n.Addr() + "&"
	}
	return u + "master_name=" + RedisSentinelMaster
}

// Master returns the server a running Sentinel names as the master.
func (s *RedisSentinel) Master(ctx context.Context) (*Redis, error) {
	var last error = errors.New("no sentinel is running")
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), MaxRetries: -1, DialTimeout: time.Second})
		addr, err := c.GetMasterAddrByName(ctx, RedisSentinelMaster).Result()
		_ = c.Close()
		if err != nil {
			last = err
			continue
		}
		if len(addr) == 2 {
			if r := byAddr(s.Servers, net.JoinHostPort(addr[0], addr[1])); r != nil {
				return r, nil
			}
		}
		last = fmt.Errorf("sentinel %s names master %v, not a server of the setup", sn.Addr(), addr)
	}
	return nil, last
}

// WaitReady waits until every running Sentinel names a running server as
// the master, that server says it is a master, and each other running
// server is its connected replica.
func (s *RedisSentinel) WaitReady(within time.Duration) error {
	return waitCtx(within, "redis sentinel setup not ready", s.ready)
}

func (s *RedisSentinel) ready(ctx context.Context) error {
	var master *Redis
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), MaxRetries: -1, DialTimeout: time.Second})
		addr, err := c.GetMasterAddrByName(ctx, RedisSentinelMaster).Result()
		var replicas []map[string]string
		if err == nil {
			replicas, err = c.Replicas(ctx, RedisSentinelMaster).Result()
		}
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
		}
		m := net.JoinHostPort(addr[0], addr[1])
		if master != nil && master.Addr() != m {
			return fmt.Errorf("sentinels disagree on the master: %s and %s", master.Addr(), m)
		}
		if master = byAddr(s.Servers, m); master == nil || !master.Running() {
			return fmt.Errorf("sentinel %s names %s, not a running server", sn.Addr(), m)
		}
		ok := 0
		for _, rep := range replicas {
			if !strings.Contains(rep["flags"], "down") && !strings.Contains(rep["flags"], "disconnected") {
				ok++
			}
		}
		if running := s.running() - 1; ok < running {
			return fmt.Errorf("sentinel %s sees %d of %d replicas up", sn.Addr(), ok, running)
		}
	}
	for _, r := range s.Servers {
		if !r.Running() {
			continue
		}
		got, err := RedisDo(r.Addr(), time.Second, []string{"INFO", "replication"})
		if err != nil {
			return err
		}
		want := "role:slave"
		if r == master {
			want = "role:master"
		}
		if !strings.Contains(got[0], want) {
			return fmt.Errorf("server %s: want %s", r.Addr(), want)
		}
		if r != master && !strings.Contains(got[0], "master_link_status:up") {
			return fmt.Errorf("replica %s: link to the master not up", r.Addr())
		}
	}
	return nil
}

func (s *RedisSentinel) running() int {
	n := 0
	for _, r := range s.Servers {
		if r.Running() {
			n++
		}
	}
	return n
}

// Close stops every server and Sentinel and removes a shared setup's
// directory.
func (s *RedisSentinel) Close() error {
	var errs []error
	for _, r := range append(append([]*Redis(nil), s.Sentinels...), s.Servers...) {
		errs = append(errs, r.Close())
	}
	if s.ownDir {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	return errors.Join(errs...)
}
