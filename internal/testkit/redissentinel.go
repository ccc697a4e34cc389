package testkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// RedisSentinelMaster is the master name of a test Sentinel setup.
	RedisSentinelMaster = "keepstate"
	// RedisSentinelDownAfter is how long the test Sentinels wait before
	// they consider a silent master down.
	RedisSentinelDownAfter = 2 * time.Second
)

// RedisSentinel is a real Sentinel setup on loopback ports: a master, one
// replica and three Sentinels (quorum 2) watching them; failovers change
// the master (see Master). Its methods return errors, not failing a test.
type RedisSentinel struct {
	// Servers are the master and the replica in creation order.
	Servers   []*Redis
	Sentinels []*Redis
	redisGroup
}

// StartRedisSentinel starts a Sentinel setup for the test and stops it when
// the test ends. Without redis-server the test is skipped (see Missing).
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	LookPath(t, "redis-server", RedisInstall)
	s, err := launchRedisSentinel()
	return closeAtEnd(t, "redis sentinel setup", s, err)
}

// SharedRedisSentinel returns the Sentinel setup every test of the process
// shares (see SharedRedisCluster).
func SharedRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	LookPath(t, "redis-server", RedisInstall)
	return sharedRedisSentinel.use(t, "the shared redis sentinel setup", func() (*RedisSentinel, string, error) {
		s, err := launchRedisSentinel()
		return s, "", err
	})
}

// launchRedisSentinel starts a setup in a temporary directory that Close
// removes.
func launchRedisSentinel() (_ *RedisSentinel, err error) {
	g, err := newRedisGroup("keepstate-redis-sentinel-")
	if err != nil {
		return nil, err
	}
	s := &RedisSentinel{redisGroup: g}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	// A master stopped with SIGTERM exits at once instead of waiting up to
	// 10 s for a replica that is gone.
	now := []string{"--shutdown-on-sigterm", "now"}
	master, err := s.startNode("server0", "", redisConfig{args: now})
	if err != nil {
		return nil, err
	}
	replicaOf := slices.Concat(now, []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port())})
	s.Servers = append(s.Servers, master)
	replica, err := s.startNode("server1", "", redisConfig{args: replicaOf})
	if err != nil {
		return nil, err
	}
	s.Servers = append(s.Servers, replica)
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\nsentinel down-after-milliseconds %[1]s %[3]d\n"+
		"sentinel failover-timeout %[1]s 10000\n", RedisSentinelMaster, master.Port(), RedisSentinelDownAfter.Milliseconds())
	for i := range 3 {
		sn, err := s.startNode("sentinel"+strconv.Itoa(i), conf, redisConfig{args: []string{"--sentinel"}})
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

// askSentinel returns the address of the master Sentinel sn names, and with
// replicas the replicas it knows of.
func askSentinel(ctx context.Context, sn *Redis, replicas bool) (string, []map[string]string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	addr, err := c.GetMasterAddrByName(ctx, RedisSentinelMaster).Result()
	if err == nil && len(addr) != 2 {
		err = fmt.Errorf("sentinel %s names master %v", sn.Addr(), addr)
	}
	if err != nil {
		return "", nil, err
	}
	var reps []map[string]string
	if replicas {
		reps, err = c.Replicas(ctx, RedisSentinelMaster).Result()
	}
	return net.JoinHostPort(addr[0], addr[1]), reps, err
}

// Master returns the server a running Sentinel names as the master.
func (s *RedisSentinel) Master(ctx context.Context) (*Redis, error) {
	var last error = errors.New("no sentinel is running")
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		addr, _, err := askSentinel(ctx, sn, false)
		if err != nil {
			last = err
		} else if r := byAddr(s.Servers, addr); r != nil {
			return r, nil
		} else {
			last = fmt.Errorf("sentinel %s names master %v, not a server of the setup", sn.Addr(), addr)
		}
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
	running := 0
	for _, r := range s.Servers {
		if r.Running() {
			running++
		}
	}
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		m, replicas, err := askSentinel(ctx, sn, true)
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
		}
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
		if ok < running-1 {
			return fmt.Errorf("sentinel %s sees %d of %d replicas up", sn.Addr(), ok, running-1)
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

// Close stops every server and Sentinel and removes a shared setup's
// directory.
func (s *RedisSentinel) Close() error { return s.close((*Redis).Close) }
