package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// spreadSpec is the orders table over 8 partitions.
var spreadSpec = func() engine.TableSpec {
	s := orderSpec
	s.Partitions = 8
	return s
}()

// spreadDocs returns n documents of spreadSpec by partition, each in its
// PartitionFor partition, with many ties in both indexes.
func spreadDocs(n int) map[int32][]engine.Doc {
	out := map[int32][]engine.Doc{}
	for i := range n {
		key := fmt.Sprintf("cust-%03d", i)
		p := engine.PartitionFor([]byte(key), spreadSpec.Partitions)
		out[p] = append(out[p], odoc(key, p, int64(i+1), float64(i%7), []string{"gold", "silver", "bronze"}[i%3]))
	}
	return out
}

// TestClusterTableSpreadsOverMasters writes one table's partitions on a
// cluster, checks that their keys are served by at least two masters (each
// partition's checkpoint found on the master of its slot), and that every
// query, paged, returns the same pages as on a single server.
func TestClusterTableSpreadsOverMasters(t *testing.T) {
	rc := testkit.SharedRedisCluster(t)
	cs := openModeStore(t, ModeCluster, rc.URL())
	ss := openStore(t, testkit.StartRedis(t))
	ct, st := openTable(t, cs, spreadSpec), openTable(t, ss, spreadSpec)
	docs := spreadDocs(120)
	for p, ds := range docs {
		tapply(t, ct, p, 10, ds...)
		tapply(t, st, p, 10, ds...)
	}

	masters := map[string][]int32{}
	for p := range spreadSpec.Partitions {
		key := ct.keys.checkpoint(p)
		slot, err := rc.Slot(ctxT(t), key)
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := rc.MasterOf(ctxT(t), slot)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := rc.Do(ctxT(t), m, "GET", key); err != nil || got != "10" {
			t.Fatalf("GET %s on %s (master of slot %d) = %v, %v; want 10", key, m.Addr(), slot, got, err)
		}
		masters[m.Addr()] = append(masters[m.Addr()], p)
	}
	t.Logf("partitions by master: %v", masters)
	if len(masters) < 2 {
		t.Fatalf("the table's %d partitions are on %d master(s) %v; want at least 2", spreadSpec.Partitions, len(masters), masters)
	}

	queries := []engine.IndexQuery{
		{Index: "total", Limit: 7},
		{Index: "total", Limit: 7, Desc: true},
		{Index: "total", Limit: 5, Min: engine.Num(2), HasMin: true, Max: engine.Num(5), HasMax: true},
		{Index: "tier", Limit: 9},
		{Index: "tier", Limit: 9, Desc: true},
		{Index: "tier", Limit: 4, Min: engine.Str("c"), HasMin: true},
	}
	for _, q := range queries {
		t.Run(fmt.Sprintf("%s desc=%v limit=%d", q.Index, q.Desc, q.Limit), func(t *testing.T) {
			sameQueryPages(t, ct, st, q, 120)
		})
	}
	ties := spreadSpec
	ties.Name, ties.TiesAscending = "ranked", true
	ctt, stt := openTable(t, cs, ties), openTable(t, ss, ties)
	for p, ds := range docs {
		tapply(t, ctt, p, 10, ds...)
		tapply(t, stt, p, 10, ds...)
	}
	for _, ix := range []string{"total", "tier"} {
		t.Run("ties ascending "+ix, func(t *testing.T) {
			sameQueryPages(t, ctt, stt, engine.IndexQuery{Index: ix, Limit: 6, Desc: true}, 120)
		})
	}
}

// sameQueryPages pages through q on the cluster's table and the single
// server's, and fails unless every page (documents and cursor) is the same
// and the pages hold want documents in all.
func sameQueryPages(t *testing.T, cluster, single *table, q engine.IndexQuery, want int) {
	t.Helper()
	total := 0
	for page := 0; ; page++ {
		cp, err := cluster.Query(ctxT(t), q)
		if err != nil {
			t.Fatalf("page %d on the cluster: %v", page, err)
		}
		sp, err := single.Query(ctxT(t), q)
		if err != nil {
			t.Fatalf("page %d on the single server: %v", page, err)
		}
		if got, want := pageKeys(cp), pageKeys(sp); !slices.Equal(got, want) {
			t.Fatalf("page %d on the cluster %v; on a single server %v", page, got, want)
		}
		if (cp.Next == nil) != (sp.Next == nil) || cp.Next != nil && (cp.Next.Value != sp.Next.Value || string(cp.Next.Key) != string(sp.Next.Key)) {
			t.Fatalf("page %d: cursor on the cluster %+v; on a single server %+v", page, cp.Next, sp.Next)
		}
		total += len(cp.Docs)
		if cp.Next == nil {
			break
		}
		q.After = cp.Next
	}
	if q.HasMin || q.HasMax {
		return
	}
	if total != want {
		t.Fatalf("pages held %d documents; want %d", total, want)
	}
}

func pageKeys(p engine.DocPage) []string {
	out := make([]string, len(p.Docs))
	for i, d := range p.Docs {
		out[i] = string(d.Key)
	}
	return out
}

// TestClusterOpenTable checks what OpenTable refuses on a cluster: a table
// without its partition count, and one left by the layout that kept a
// whole table under one hash tag until RemoveOldLayout wipes it.
func TestClusterOpenTable(t *testing.T) {
	rc := testkit.SharedRedisCluster(t)
	s := openModeStore(t, ModeCluster, rc.URL())

	if _, err := s.OpenTable(ctxT(t), orderSpec); !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "Partitions") {
		t.Fatalf("OpenTable without partitions = %v; want ErrInvalid naming Partitions", err)
	}

	old := "{" + s.keys.prefix + "t:orders}:"
	for _, kv := range [][2]string{{old + "spec", "1|total:number,tier:string"}, {old + "p:0:checkpoint", "7"}} {
		if err := s.client.Set(ctxT(t), kv[0], kv[1], 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.OpenTable(ctxT(t), spreadSpec)
	if !errors.Is(err, ErrOldLayout) || !strings.Contains(err.Error(), "keepstate reset") {
		t.Fatalf("OpenTable over the old layout = %v; want ErrOldLayout naming keepstate reset", err)
	}
	if removed, err := s.RemoveOldLayout(ctxT(t), "orders"); err != nil || !removed {
		t.Fatalf("RemoveOldLayout = %v, %v; want true, nil", removed, err)
	}
	if n := s.client.Exists(ctxT(t), old+"spec", old+"p:0:checkpoint").Val(); n != 0 {
		t.Fatalf("%d keys of the old layout left", n)
	}
	tb := openTable(t, s, spreadSpec)
	if _, ok, err := tb.Checkpoint(ctxT(t), 0); ok || err != nil {
		t.Fatalf("Checkpoint(0) of the new table = %v, %v; want none", ok, err)
	}
	if removed, err := s.RemoveOldLayout(ctxT(t), "orders"); err != nil || removed {
		t.Fatalf("RemoveOldLayout again = %v, %v; want false, nil", removed, err)
	}
}

// TestClusterApplyRefusesAForeignKey: on a cluster a document must be in
// its key's PartitionFor partition, where Get looks for it.
func TestClusterApplyRefusesAForeignKey(t *testing.T) {
	rc := testkit.SharedRedisCluster(t)
	tb := openTable(t, openModeStore(t, ModeCluster, rc.URL()), spreadSpec)
	p := engine.PartitionFor([]byte("a"), spreadSpec.Partitions)
	other := (p + 1) % spreadSpec.Partitions
	e, err := tb.Claim(ctxT(t), other)
	if err != nil {
		t.Fatal(err)
	}
	err = tb.Apply(ctxT(t), engine.DocBatch{Partition: other, Epoch: e, Checkpoint: 1, Docs: []engine.Doc{odoc("a", other, 1, 1, "x")}})
	if !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("Apply of key a (partition %d) to partition %d = %v; want ErrInvalid", p, other, err)
	}
	if _, ok, _ := tb.Checkpoint(ctxT(t), other); ok {
		t.Fatalf("the refused batch moved the checkpoint")
	}
}

// TestClusterStreamPerPartition: on a cluster each partition writes the
// table's stream under its own hash tag, in its own MULTI/EXEC.
func TestClusterStreamPerPartition(t *testing.T) {
	rc := testkit.SharedRedisCluster(t)
	s := openModeStore(t, ModeCluster, rc.URL(), WithTableStream(spreadSpec.Name, changeStream))
	tb := openTable(t, s, spreadSpec)
	docs := spreadDocs(40)
	for p, ds := range docs {
		tapply(t, tb, p, 3, ds...)
	}
	for p := range spreadSpec.Partitions {
		key := tb.keys.base(p) + "stream:" + changeStream.Key
		if key != tb.streamKey(p) {
			t.Fatalf("stream key of partition %d = %q; want %q", p, tb.streamKey(p), key)
		}
		var got []string
		for _, e := range streamEntries(t, s, key) {
			got = append(got, e[1])
		}
		var want []string
		for _, d := range docs[p] {
			want = append(want, string(d.Key))
		}
		if !slices.Equal(got, want) {
			t.Errorf("stream of partition %d = %v; want %v", p, got, want)
		}
	}
	if err := tb.Reset(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for p := range spreadSpec.Partitions {
		if n := s.client.Exists(ctxT(t), tb.streamKey(p)).Val(); n != 0 {
			t.Errorf("stream of partition %d survived Reset", p)
		}
	}
}
