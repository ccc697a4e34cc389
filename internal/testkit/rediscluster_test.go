package testkit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/redis/go-redis/v9"
)

func TestSharedRedisCluster(t *testing.T) {
	c := testkit.SharedRedisCluster(t)
	if again := testkit.SharedRedisCluster(t); again != c {
		t.Fatal("SharedRedisCluster started a second cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(o)
	defer cc.Close()
	for i := range 100 {
		if err := cc.Set(ctx, "k"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatalf("SET through the cluster: %v", err)
		}
	}
	masters := map[string]bool{}
	for _, slot := range []int{0, 8000, 16383} {
		m, reps, err := c.MasterOf(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if len(reps) != 1 {
			t.Errorf("slot %d: %d replicas, want 1", slot, len(reps))
		}
		masters[m.Addr()] = true
	}
	if len(masters) != 3 {
		t.Errorf("slots 0, 8000, 16383 served by %d masters, want 3", len(masters))
	}
}

func TestSharedRedisSentinel(t *testing.T) {
	s := testkit.SharedRedisSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := redis.ParseFailoverURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewFailoverClient(o)
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the sentinels: %v", err)
	}
	m, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := testkit.RedisDo(m.Addr(), time.Second, []string{"GET", "k"})
	if err != nil || got[0] != "v" {
		t.Errorf("GET k on the master %s = %v, %v; want v", m.Addr(), got, err)
	}
}
