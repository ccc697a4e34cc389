package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/movies"
	"github.com/keepstate/keepstate/redisstore"
)

// TestStaleCopiesAreDropped: after a second instance takes partitions from
// the first, the first deletes its copies of them from its clover store
// once --stale-drop-after has passed, and keeps the partitions it still
// owns. A shared store (Redis) is never asked to.
func TestStaleCopiesAreDropped(t *testing.T) {
	if _, ok := any((*redisstore.Store)(nil)).(engine.InstanceLocal); ok {
		t.Fatal("redisstore.Store is InstanceLocal: the new owner's documents would be dropped")
	}
	if _, ok := any((*docstore.Store)(nil)).(engine.InstanceLocal); !ok {
		t.Fatal("docstore.Store is not InstanceLocal: stale copies would stay forever")
	}
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	ca := testConfig(t, brokers, reg.URL())
	ca.StaleDropAfter = 500 * time.Millisecond
	ca.StandbyReplicas = 0 // a standby of a moved partition is kept, not dropped
	logs := &testkit.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of a:\n%s", logs.String())
		}
	})
	a := startInstanceLog(t, ca, logs.Logger())
	var lines []string
	for id := 1; id <= 30; id++ {
		lines = append(lines, fmt.Sprintf(`{"movie_id":%d,"rating":5}`, id))
	}
	produceJSON(t, ca, lines...)
	for id := int64(1); id <= 30; id++ {
		waitMovie(t, a.api, movie{MovieID: id, Rating: 5, Count: 1}, 30*time.Second)
	}

	cb := ca
	cb.DataDir = t.TempDir()
	b := startInstance(t, cb)
	var moved []int32
	testkit.Eventually(t, 30*time.Second, "b owns partitions", func() error {
		var err error
		moved, err = ownPartitions(strings.TrimPrefix(b.api, "http://"))
		if err != nil || len(moved) == 0 || len(moved) == 3 {
			return fmt.Errorf("b owns %v (%v)", moved, err)
		}
		return nil
	})
	testkit.Eventually(t, 30*time.Second, "a drops its copies of b's partitions", func() error {
		dropped := map[string]bool{}
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `msg="dropped the stale copy of a partition that moved away"`) {
				for _, f := range strings.Fields(line) {
					if strings.HasPrefix(f, "partition=") {
						dropped[f] = true
					}
				}
			}
		}
		for _, p := range moved {
			if !dropped[fmt.Sprintf("partition=%d", p)] {
				return fmt.Errorf("partition %d not dropped yet", p)
			}
		}
		return nil
	})
	a.stop(t)

	s, err := docstore.Open(ca.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tb, err := s.OpenTable(context.Background(), movies.Spec)
	if err != nil {
		t.Fatal(err)
	}
	isMoved := map[int32]bool{}
	for _, p := range moved {
		isMoved[p] = true
	}
	for p := int32(0); p < 3; p++ {
		n := 0
		if err := tb.(engine.TableScanner).ScanPartition(context.Background(), p, func(engine.Doc) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if isMoved[p] && n != 0 {
			t.Errorf("partition %d moved to b but a's store still holds %d of its documents", p, n)
		}
		if !isMoved[p] && n == 0 {
			t.Errorf("partition %d stayed with a but a's store holds none of its documents", p)
		}
		if _, ok, err := tb.Checkpoint(context.Background(), p); err != nil || ok == isMoved[p] {
			t.Errorf("partition %d (moved %v): checkpoint present = %v (%v)", p, isMoved[p], ok, err)
		}
	}
}
