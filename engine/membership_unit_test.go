package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
)

// moviesOf returns n movie ids whose aggregate partition (of parts) is p.
func moviesOf(p, parts int32, n int) []int64 {
	var out []int64
	for id := int64(1); len(out) < n; id++ {
		if engine.PartitionFor(engine.Int64Keys.Append(nil, id), parts) == p {
			out = append(out, id)
		}
	}
	return out
}

// owns returns nil once e owns exactly want, all RUNNING.
func owns(e *engine.Engine, want ...int32) func() error {
	return func() error {
		got := e.Partitions()
		if len(got) != len(want) {
			return fmt.Errorf("partitions %v, want %v", got, want)
		}
		for _, p := range want {
			if got[p] != engine.Running {
				return fmt.Errorf("partitions %v, want %v RUNNING", got, want)
			}
		}
		return e.Ready()
	}
}

// split waits until a runs one of two partitions and b the other, and
// returns them. Which goes where is the assignor's choice.
func split(t *testing.T, a, b *engine.Engine) (pa, pb int32) {
	t.Helper()
	eventually(t, "partitions split", func() error {
		for _, p := range []int32{0, 1} {
			if owns(a, p)() == nil && owns(b, 1-p)() == nil {
				pa, pb = p, 1-p
				return nil
			}
		}
		return fmt.Errorf("first instance %v, second %v; want one partition each, running", a.Partitions(), b.Partitions())
	})
	return pa, pb
}

// TestUnitTwoInstances runs two engines with their own (instance-local)
// stores on one cluster: the second one's join splits the partitions, the
// group description routes each movie to its owner, queries answer only
// running partitions, and when the second leaves, the first takes its
// partition back and restores it; every count stays exact.
func TestUnitTwoInstances(t *testing.T) {
	c := newCluster(t)
	cfg := unitConfig(c, engine.ExactlyOnce)
	cfg.Partitions = 2
	storeA, storeB := memstore.New(memstore.Local()), memstore.New(memstore.Local())
	a := newRig(t, c, cfg, storeA).start(t)
	m0, m1 := moviesOf(0, 2, 2), moviesOf(1, 2, 2)
	first := []rating{{m0[0], 4}, {m1[0], 6}, {m0[1], 8}, {m1[1], 2}}
	a.rate(t, 0, first[:2]...)
	a.rate(t, 1, first[2:]...)
	eventually(t, "first instance stores everything", a.storeHas(totals(first)))
	eventually(t, "first instance runs both partitions", owns(a.e, 0, 1))
	if err := a.e.Ready(); err != nil {
		t.Errorf("Ready with both partitions running: %v", err)
	}

	cfgB := cfg
	cfgB.AdvertiseAddr = "127.0.0.1:7002"
	b := newRig(t, c, cfgB, storeB).start(t)
	pa, pb := split(t, a.e, b.e)
	// From here on, m0 are movies of the first instance's partition, m1 of
	// the second's.
	if pa == 1 {
		m0, m1 = m1, m0
	}
	ctx := context.Background()
	eventually(t, "owners described", func() error {
		m, err := a.e.Membership(ctx)
		if err != nil {
			return err
		}
		if m.Owners[pa] != cfg.AdvertiseAddr || m.Owners[pb] != cfgB.AdvertiseAddr {
			return fmt.Errorf("owners %v", m.Owners)
		}
		return nil
	})
	if addr, local, err := a.e.Owner(ctx, engine.Int64Keys.Append(nil, m0[0])); err != nil || !local || addr != cfg.AdvertiseAddr {
		t.Errorf("Owner of a local movie: got %q, %v, %v; want %q, local", addr, local, err, cfg.AdvertiseAddr)
	}
	if addr, local, err := a.e.Owner(ctx, engine.Int64Keys.Append(nil, m1[0])); err != nil || local || addr != cfgB.AdvertiseAddr {
		t.Errorf("Owner of a remote movie: got %q, %v, %v; want %q, remote", addr, local, err, cfgB.AdvertiseAddr)
	}
	q := a.e.View()
	if _, err := q.Get(ctx, engine.Int64Keys.Append(nil, m1[0])); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("View.Get of a partition running elsewhere: got %v, want ErrUnavailable", err)
	}
	if got, err := viewMovie(ctx, q, m0[0]); err != nil || got.Count != 1 {
		t.Errorf("View.Get of a local movie: got %+v, %v; want count 1", got, err)
	}
	page, covered, err := q.QueryLocal(ctx, avgQuery(10))
	if err != nil || len(covered) != 1 || covered[0] != pa {
		t.Errorf("QueryLocal covered: got %v, %v; want [%d]", covered, err, pa)
	}
	for _, d := range page.Docs {
		if d.Partition != pa {
			t.Errorf("QueryLocal returned key %x of partition %d, not running here", d.Key, d.Partition)
		}
	}
	second := []rating{{m0[0], 10}, {m1[0], 10}}
	a.rate(t, 0, second...)
	all := totals(first, second)
	eventually(t, "second instance restored and counted its partition", b.storeHas(map[int64]movieStats{m1[0]: all[m1[0]], m1[1]: all[m1[1]]}))
	eventually(t, "first instance counted its partition", a.storeHas(map[int64]movieStats{m0[0]: all[m0[0]], m0[1]: all[m0[1]]}))

	b.stop(t)
	eventually(t, "first instance runs both partitions again", owns(a.e, 0, 1))
	third := []rating{{m1[1], 5}}
	a.rate(t, 1, third...)
	eventually(t, "first instance restored the second's partition and counted on", a.storeHas(totals(first, second, third)))
}

// TestUnitStaleCopyDropped runs an instance with an instance-local store
// and StaleDropAfter, without standby replicas (a standby keeps its copy):
// once a second instance takes one of its two partitions, it deletes its
// copy of that partition and keeps the other.
func TestUnitStaleCopyDropped(t *testing.T) {
	c := newCluster(t)
	cfg := unitConfig(c, engine.ExactlyOnce)
	cfg.Partitions = 2
	cfg.StaleDropAfter = 20 * time.Millisecond
	cfg.StandbyReplicas = 0
	storeA := memstore.New(memstore.Local())
	a := newRig(t, c, cfg, storeA).start(t)
	m0, m1 := moviesOf(0, 2, 1), moviesOf(1, 2, 1)
	first := []rating{{m0[0], 4}, {m1[0], 6}}
	a.rate(t, 0, first...)
	eventually(t, "first instance stores everything", a.storeHas(totals(first)))
	cfgB := cfg
	cfgB.AdvertiseAddr = "127.0.0.1:7002"
	b := newRig(t, c, cfgB, memstore.New(memstore.Local())).start(t)
	if pa, _ := split(t, a.e, b.e); pa == 1 {
		m0, m1 = m1, m0 // m0: the partition kept, m1: the one taken
	}
	ctx := context.Background()
	eventually(t, "stale copy of the partition taken dropped by the first instance", func() error {
		if _, err := movieTable(t, storeA).Get(ctx, engine.Int64Keys.Append(nil, m1[0])); !errors.Is(err, engine.ErrNotFound) {
			return fmt.Errorf("movie %d still in the first store: %v", m1[0], err)
		}
		return nil
	})
	if _, err := movieTable(t, storeA).Get(ctx, engine.Int64Keys.Append(nil, m0[0])); err != nil {
		t.Errorf("movie %d of the partition still owned: %v, want kept", m0[0], err)
	}
}

// TestUnitNewRejectsInvalidConfig checks that New refuses bad settings
// with ErrInvalid before connecting to anything.
func TestUnitNewRejectsInvalidConfig(t *testing.T) {
	c := newCluster(t)
	tests := []struct {
		name string
		edit func(*engine.Config)
	}{
		{"no brokers", func(c *engine.Config) { c.Brokers = nil }},
		{"no application id", func(c *engine.Config) { c.ApplicationID = "" }},
		{"zero commit interval", func(c *engine.Config) { c.CommitInterval = 0 }},
		{"short session timeout", func(c *engine.Config) { c.SessionTimeout = time.Millisecond }},
		{"zero cache", func(c *engine.Config) { c.CacheMaxDocs = 0 }},
		{"no record buffer", func(c *engine.Config) { c.BufferedRecords = 0 }},
		{"unknown guarantee", func(c *engine.Config) { c.ProcessingGuarantee = "maybe" }},
		{"short transaction timeout", func(c *engine.Config) { c.TransactionTimeout = time.Millisecond }},
		{"no replicas", func(c *engine.Config) { c.ReplicationFactor = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := unitConfig(c, engine.ExactlyOnce)
			tt.edit(&cfg)
			if _, err := newMovieEngine(cfg, movieTable(t, memstore.New()), &unitSerde{}); !errors.Is(err, engine.ErrInvalid) {
				t.Errorf("New: got %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := newMovieEngine(unitConfig(c, engine.ExactlyOnce), nil, &unitSerde{}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("New without a store: got %v, want ErrInvalid", err)
	}
}

// TestUnitWarmupOfEmptyPartition: a second instance joins while no record
// was ever written, so every changelog is empty and its store holds no
// checkpoint. Its warm-up is still caught up (an empty copy of an empty
// changelog is exact) and must take its share of the actives, not ask for
// a rebalance every few seconds for ever.
func TestUnitWarmupOfEmptyPartition(t *testing.T) {
	c := newCluster(t)
	cfg := unitConfig(c, engine.ExactlyOnce)
	cfg.Partitions = 2
	a := newRig(t, c, cfg, memstore.New(memstore.Local())).start(t)
	eventually(t, "first instance runs both partitions", owns(a.e, 0, 1))
	cfgB := cfg
	cfgB.AdvertiseAddr = "127.0.0.1:7002"
	b := newRig(t, c, cfgB, memstore.New(memstore.Local())).start(t)
	split(t, a.e, b.e)
}
