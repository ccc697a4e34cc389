package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/movies"
	"github.com/keepstate/keepstate/redisstore"
)

// useRedisCluster points c at a Redis Cluster started for the test (three
// masters, three replicas; AOF so that a restarted node keeps what it had).
func useRedisCluster(t *testing.T, c *app.Config) *testkit.RedisCluster {
	rc := testkit.StartRedisCluster(t, testkit.WithRedisPersistence(testkit.RedisAOF))
	c.Store, c.RedisMode, c.RedisURL = app.StoreRedis, string(redisstore.ModeCluster), rc.URL()
	return rc
}

// movieTag is the hash tag of partition p of the movie table of c on a
// cluster.
func movieTag(c app.Config, p int) string {
	return "{" + c.ApplicationID + ":t:movies:" + strconv.Itoa(p) + "}"
}

// movieSlot is the hash slot of partition 0 of the movie table of c on a
// cluster.
func movieSlot(t *testing.T, rc *testkit.RedisCluster, c app.Config) int {
	t.Helper()
	slot, err := rc.Slot(context.Background(), movieTag(c, 0)+":spec")
	if err != nil {
		t.Fatal(err)
	}
	return slot
}

// redisFault is a fault injected while ratings flow into the instance
// whose API is api.
type redisFault func(t *testing.T, ctx context.Context, api string)

// watchUnready polls api's /readyz until stop is called, which returns the
// first 503 body that named the store as unavailable ("" if none).
func watchUnready(api string) (stop func() string) {
	done, out := make(chan struct{}), make(chan string, 1)
	go func() {
		seen := ""
		for {
			select {
			case <-done:
				out <- seen
				return
			case <-time.After(20 * time.Millisecond):
			}
			if code, body := httpGet(api + "/readyz"); seen == "" && code == http.StatusServiceUnavailable &&
				strings.Contains(body, "store unavailable") {
				seen = body
			}
		}
	}()
	return func() string { close(done); return <-out }
}

// runRedisFault produces ratings into one instance for a few seconds,
// injects fault once processing is under way, and then requires every
// movie of the API to equal the ground truth and /readyz to say 200.
func runRedisFault(t *testing.T, c app.Config, fault redisFault) *instance {
	t.Helper()
	in := startInstance(t, c)
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	p := produceConfig(c, 12000, 400, 21)
	p.Rate = 1500
	truthOf(p, truth, sums)
	produced := make(chan error, 1)
	go func() { _, err := app.Produce(context.Background(), p, nil); produced <- err }()
	testkit.Eventually(t, 60*time.Second, "processing under way", func() error {
		if _, code, _ := getMovie(in.api, 2); code != http.StatusOK {
			return fmt.Errorf("movie 2: %d", code)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fault(t, ctx, in.api)
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	testkit.Eventually(t, 120*time.Second, "exact counts after the fault", func() error {
		got, err := allMovies(in.api[len("http://"):])
		if err != nil {
			return err
		}
		return sameMovies(got, truth)
	})
	testkit.Eventually(t, 30*time.Second, "ready after the fault", func() error {
		if code, body := httpGet(in.api + "/readyz"); code != http.StatusOK {
			return fmt.Errorf("readyz %d %s", code, body)
		}
		return nil
	})
	return in
}

// TestE2ERedisClusterMasterKilled: the master holding partition 0 of the movie table is
// killed with SIGKILL while its replica is in sync; the replica takes over,
// the old master comes back as a replica, and every count is exact.
func TestE2ERedisClusterMasterKilled(t *testing.T) {
	c := testConfig(t, testkit.Kafka(t), testkit.StartRegistry(t).URL())
	rc := useRedisCluster(t, &c)
	slot := movieSlot(t, rc, c)
	runRedisFault(t, c, func(t *testing.T, ctx context.Context, api string) {
		master, replicas, err := rc.MasterOf(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		unready := watchUnready(api)
		if err := master.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := rc.WaitHealthy(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		if body := unready(); body == "" {
			t.Errorf("/readyz never said 503 naming the store while the master was replaced")
		} else if !strings.Contains(body, "hash slot of {") {
			t.Errorf("/readyz during the failover: %s; want it to name the hash slot of the partition waiting", body)
		} else {
			t.Logf("/readyz during the failover: %s", body)
		}
		if now, _, err := rc.MasterOf(ctx, slot); err != nil || now != replicas[0] {
			t.Fatalf("slot %d served by %v (%v), want the replica %s", slot, now, err, replicas[0].Addr())
		}
		if err := master.Start(); err != nil {
			t.Fatal(err)
		}
		if err := rc.WaitHealthy(60 * time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

// TestE2ERedisClusterManualFailover: CLUSTER FAILOVER on the replica of the
// master of the movie table's partition 0 while ratings flow.
func TestE2ERedisClusterManualFailover(t *testing.T) {
	c := testConfig(t, testkit.Kafka(t), testkit.StartRegistry(t).URL())
	rc := useRedisCluster(t, &c)
	slot := movieSlot(t, rc, c)
	runRedisFault(t, c, func(t *testing.T, ctx context.Context, api string) {
		_, replicas, err := rc.MasterOf(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rc.Do(ctx, replicas[0], "CLUSTER", "FAILOVER"); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 30*time.Second, "the replica serves the slot", func() error {
			if now, _, err := rc.MasterOf(ctx, slot); err != nil || now != replicas[0] {
				return fmt.Errorf("slot %d served by %v (%v)", slot, now, err)
			}
			return nil
		})
	})
}

// TestE2ERedisClusterSlotMigrated: the slot of the movie table's partition 0 moves to another
// master, ten keys per MIGRATE, while ratings flow.
func TestE2ERedisClusterSlotMigrated(t *testing.T) {
	c := testConfig(t, testkit.Kafka(t), testkit.StartRegistry(t).URL())
	rc := useRedisCluster(t, &c)
	slot := movieSlot(t, rc, c)
	runRedisFault(t, c, func(t *testing.T, ctx context.Context, api string) {
		src, _, err := rc.MasterOf(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		dst, _, err := rc.MasterOf(ctx, (slot+8000)%16384)
		if err != nil || dst == src {
			dst, _, err = rc.MasterOf(ctx, (slot+5500)%16384)
		}
		if err != nil || dst == src {
			t.Fatalf("no other master: %v", err)
		}
		// Most movies of partition 0 stored first (a rarely rated one may
		// come later), so that the migration moves them while their
		// updates go on.
		movies0 := int64(0)
		for id := range int64(400) {
			if engine.PartitionFor(movies.Key(id+1), c.Partitions) == 0 {
				movies0++
			}
		}
		movies0 = movies0 * 9 / 10
		testkit.Eventually(t, 30*time.Second, "most movies of partition 0 in the slot", func() error {
			n, err := rc.Do(ctx, src, "CLUSTER", "COUNTKEYSINSLOT", slot)
			if c, _ := n.(int64); err != nil || c < movies0 {
				return fmt.Errorf("%v keys in slot %d (%v), want %d movies", n, slot, err, movies0)
			}
			return nil
		})
		// 100 ms between batches spreads the migration over the flow of
		// ratings (the scenario, not synchronisation).
		n, err := rc.MigrateSlot(ctx, slot, dst, 10, func() { time.Sleep(100 * time.Millisecond) })
		if err != nil {
			t.Fatalf("migrate slot %d after %d keys: %v", slot, n, err)
		}
		t.Logf("slot %d moved from %s to %s: %d keys", slot, src.Addr(), dst.Addr(), n)
		if int64(n) < movies0 {
			t.Errorf("moved %d keys, want at least %d (most movies of partition 0)", n, movies0)
		}
		if now, _, err := rc.MasterOf(ctx, slot); err != nil || now != dst {
			t.Fatalf("slot %d served by %v (%v), want %s", slot, now, err, dst.Addr())
		}
	})
}

// TestE2ERedisSentinelFailover: the Sentinel setup's master is killed with
// SIGKILL; the Sentinels promote the replica and every count is exact.
func TestE2ERedisSentinelFailover(t *testing.T) {
	c := testConfig(t, testkit.Kafka(t), testkit.StartRegistry(t).URL())
	rs := testkit.StartRedisSentinel(t)
	c.Store, c.RedisMode, c.RedisURL = app.StoreRedis, string(redisstore.ModeSentinel), rs.URL()
	runRedisFault(t, c, func(t *testing.T, ctx context.Context, api string) {
		old, err := rs.Master(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := old.Kill(); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 60*time.Second, "the sentinels promote the replica", func() error {
			if m, err := rs.Master(ctx); err != nil || m == old {
				return fmt.Errorf("master %v (%v)", m, err)
			}
			return nil
		})
		if err := old.Start(); err != nil {
			t.Fatal(err)
		}
		if err := rs.WaitReady(60 * time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

// checkpoints reads the movie table's checkpoints of partitions parts on
// node (absent ones as -1).
func checkpoints(t *testing.T, ctx context.Context, rc *testkit.RedisCluster, node *testkit.Redis, c app.Config, parts []int) []int64 {
	t.Helper()
	out := make([]int64, len(parts))
	for i, p := range parts {
		v, err := rc.Do(ctx, node, "GET", movieTag(c, p)+":checkpoint")
		out[i] = -1
		if s, ok := v.(string); ok && err == nil {
			out[i], _ = strconv.ParseInt(s, 10, 64)
		}
	}
	return out
}

// partitionsOn returns the movie table's partitions (of 3) whose slot
// master serves.
func partitionsOn(t *testing.T, ctx context.Context, rc *testkit.RedisCluster, master *testkit.Redis, c app.Config) []int {
	t.Helper()
	var out []int
	for p := range 3 {
		slot, err := rc.Slot(ctx, movieTag(c, p)+":spec")
		if err != nil {
			t.Fatal(err)
		}
		if m, _, err := rc.MasterOf(ctx, slot); err != nil {
			t.Fatal(err)
		} else if m == master {
			out = append(out, p)
		}
	}
	return out
}

// TestE2ERedisClusterLostWrites: the replica of the master of the movie
// table's partition 0 (and of any other partition it serves) is killed, writes go on for a while on the master alone, then the master is
// killed too and the replica comes back from its own AOF and takes over:
// every write acknowledged since the replica died is lost, checkpoints
// included. The checkpoints must have moved back with them and the
// changelog must have replayed them: every count is exact.
func TestE2ERedisClusterLostWrites(t *testing.T) {
	c := testConfig(t, testkit.Kafka(t), testkit.StartRegistry(t).URL())
	rc := useRedisCluster(t, &c)
	slot := movieSlot(t, rc, c)
	in := runRedisFault(t, c, func(t *testing.T, ctx context.Context, api string) {
		master, replicas, err := rc.MasterOf(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		replica := replicas[0]
		if err := replica.Kill(); err != nil {
			t.Fatal(err)
		}
		parts := partitionsOn(t, ctx, rc, master, c)
		kept := checkpoints(t, ctx, rc, master, c, parts)
		var acked []int64
		testkit.Eventually(t, 30*time.Second, "writes acknowledged by the master alone", func() error {
			acked = checkpoints(t, ctx, rc, master, c, parts)
			for i, p := range parts {
				if acked[i] <= kept[i] {
					return fmt.Errorf("partition %d checkpoint %d, was %d when the replica died", p, acked[i], kept[i])
				}
			}
			return nil
		})
		if err := master.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := replica.Start(); err != nil {
			t.Fatal(err)
		}
		if err := rc.WaitHealthy(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		after := checkpoints(t, ctx, rc, replica, c, parts)
		t.Logf("partitions %v: checkpoints when the replica died %v, acknowledged by the master %v, after the failover %v", parts, kept, acked, after)
		for i, p := range parts {
			if after[i] >= acked[i] {
				t.Errorf("partition %d: checkpoint %d after the failover, want below the lost %d", p, after[i], acked[i])
			}
		}
		if err := master.Start(); err != nil {
			t.Fatal(err)
		}
		if err := rc.WaitHealthy(60 * time.Second); err != nil {
			t.Fatal(err)
		}
	})
	st, err := stats(in.api[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	if st.Stats.ChangelogRestored == 0 {
		t.Errorf("no changelog record replayed after the lost writes")
	}
	t.Logf("changelog records replayed: %d", st.Stats.ChangelogRestored)
}

// TestResetRemovesTheOldClusterLayout: a movie table left on a cluster by
// the layout that kept a whole table under one hash tag is refused by
// OpenTable, naming `keepstate reset`; the reset deletes it, and the table
// opens afterwards.
func TestResetRemovesTheOldClusterLayout(t *testing.T) {
	c := testConfig(t, testkit.Kafka(t), "http://127.0.0.1:1")
	rc := testkit.SharedRedisCluster(t)
	c.Store, c.RedisMode, c.RedisURL = app.StoreRedis, string(redisstore.ModeCluster), rc.URL()
	ctx := context.Background()
	old := "{" + c.ApplicationID + ":t:movies}:"
	slot, err := rc.Slot(ctx, old+"spec")
	if err != nil {
		t.Fatal(err)
	}
	master, _, err := rc.MasterOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{old + "spec", "1|avg:number;ties-ascending"}, {old + "p:0:checkpoint", "9"}} {
		if _, err := rc.Do(ctx, master, "SET", kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	spec := movies.Spec
	spec.Partitions = c.Partitions
	open := func() error {
		s, err := app.OpenStore(ctx, c, testLogger(t, "open"))
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = s.OpenTable(ctx, spec)
		return err
	}
	if err := open(); !errors.Is(err, redisstore.ErrOldLayout) || !strings.Contains(err.Error(), "keepstate reset") {
		t.Fatalf("OpenTable over the old layout = %v; want ErrOldLayout naming keepstate reset", err)
	}
	if err := app.Reset(ctx, c, false, testLogger(t, "reset")); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if n, err := rc.Do(ctx, master, "EXISTS", old+"spec", old+"p:0:checkpoint"); err != nil || n != int64(0) {
		t.Fatalf("keys of the old layout after the reset: %v, %v; want 0", n, err)
	}
	if err := open(); err != nil {
		t.Fatalf("OpenTable after the reset: %v", err)
	}
}
