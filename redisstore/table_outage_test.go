package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// outage is how long the outage test keeps redis-server stopped.
const outage = 10 * time.Second

// eachTableOperation calls every table operation, and the store's Ping
// and OpenTable, once and returns the errors by operation name.
func eachTableOperation(ctx context.Context, s *Store, tb *table, epoch int64) map[string]error {
	errs := map[string]error{}
	errs["Ping"] = s.Ping(ctx)
	_, errs["OpenTable"] = s.OpenTable(ctx, tb.spec)
	_, errs["OpenTable movies"] = s.OpenTable(ctx, movieTableSpec)
	_, errs["Claim"] = tb.Claim(ctx, 0)
	_, _, errs["Checkpoint"] = tb.Checkpoint(ctx, 0)
	_, errs["Load"] = tb.Load(ctx, [][]byte{[]byte("a"), []byte("b")})
	_, errs["Get"] = tb.Get(ctx, []byte("a"))
	_, errs["Query"] = tb.Query(ctx, engine.IndexQuery{Index: "tier", Limit: 10})
	_, errs["QueryTies"] = tb.Query(ctx, engine.IndexQuery{Index: "total", Desc: true, Limit: 10})
	errs["Apply"] = tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Checkpoint: 99,
		Docs: []engine.Doc{odoc("a", 0, 99, 9, "z")}})
	errs["ScanPartition"] = tb.ScanPartition(ctx, 0, func(engine.Doc) error { return nil })
	errs["DropPartition"] = tb.DropPartition(ctx, 7)
	// Reset is left out: it would delete the data checked after the outage.
	return errs
}

// TestTableOutageThenRecovery stops redis-server (with its AOF) for the
// outage: every operation fails with ErrUnavailable, quickly, and keeps
// failing; once the server is back the same table, not reopened, serves
// the data written before, the claim made before still writes, and the
// scripts the restarted server forgot run again.
func TestTableOutageThenRecovery(t *testing.T) {
	r := testkit.StartRedis(t, testkit.WithRedisPersistence(testkit.RedisAOF))
	s := openStore(t, r)
	spec := orderSpec
	spec.TiesAscending = true
	tb := openTable(t, s, spec)
	tapply(t, tb, 0, 5, odoc("a", 0, 5, 2, "x"), odoc("b", 0, 6, 9, "y"))
	epoch, err := tb.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}

	if err := r.Stop(); err != nil {
		t.Fatalf("stop redis-server: %v", err)
	}
	down := time.Now()
	for op, err := range eachTableOperation(ctxT(t), s, tb, epoch) {
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("%s while redis is down = %v; want ErrUnavailable", op, err)
		}
		if errors.Is(err, engine.ErrFenced) || errors.Is(err, engine.ErrNotFound) || errors.Is(err, engine.ErrInvalid) {
			t.Errorf("%s while redis is down = %v; must not look like ErrFenced, ErrNotFound or ErrInvalid", op, err)
		}
	}
	t.Logf("every operation failed with ErrUnavailable within %v", time.Since(down))
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(outage - time.Since(down)) // the rest of the outage, not a wait for a condition
		restarted <- r.Start()
	}()
	// Calls keep failing, without reopening anything, until redis is back.
	if _, err := tb.Get(ctxT(t), []byte("a")); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("Get during the outage = %v; want ErrUnavailable", err)
	}

	// The same table, not reopened, works again once redis is back.
	testkit.Eventually(t, 3*outage, "Get after redis restarts", func() error {
		_, err := tb.Get(ctxT(t), []byte("a"))
		return err
	})
	if err := <-restarted; err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
	if got, err := tb.Get(ctxT(t), []byte("a")); err != nil || got.Version != 5 || got.Index[1].Str != "x" {
		t.Fatalf("Get after the outage = %+v, %v; want the data from before (version 5, tier x)", got, err)
	}
	// Redis forgot the scripts: EVALSHA must fall back to EVAL.
	wantKeys(t, tb, engine.IndexQuery{Index: "total", Desc: true, Limit: 10}, "b", "a")
	if err := tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: epoch, Checkpoint: 9,
		Docs: []engine.Doc{odoc("a", 0, 7, 20, "z")}}); err != nil {
		t.Fatalf("Apply with the epoch claimed before the outage: %v", err)
	}
	wantKeys(t, tb, engine.IndexQuery{Index: "total", Desc: true, Limit: 10}, "a", "b")
	if next, ok, err := tb.Checkpoint(ctxT(t), 0); err != nil || !ok || next != 9 {
		t.Fatalf("Checkpoint after the outage = %d, %v, %v; want 9, true", next, ok, err)
	}
	if e, err := tb.Claim(ctxT(t), 0); err != nil || e <= epoch {
		t.Fatalf("Claim after the outage = %d, %v; want an epoch above %d", e, err, epoch)
	}
}

// TestTableRedisComesBackEmpty restarts redis-server without its data (a
// lost volume): the table reports nothing stored, which makes the engine
// restore from the changelog; the claim made before is fenced; a new
// claim writes again, with the table's spec stored again.
func TestTableRedisComesBackEmpty(t *testing.T) {
	r := testkit.StartRedis(t, testkit.WithRedisPersistence(testkit.RedisAOF))
	s := openStore(t, r)
	tb := openTable(t, s, orderSpec)
	tapply(t, tb, 0, 5, odoc("a", 0, 5, 2, "x"))
	epoch, err := tb.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RestartEmpty(); err != nil {
		t.Fatalf("restart redis-server without its data: %v", err)
	}
	// The first call may hit a pooled connection the restart closed; the
	// client retries it. The answer must then be "nothing stored".
	testkit.Eventually(t, 10*time.Second, "Checkpoint after an empty restart", func() error {
		_, ok, err := tb.Checkpoint(ctxT(t), 0)
		if err == nil && ok {
			return errors.New("checkpoint still present")
		}
		return err
	})
	if _, err := tb.Get(ctxT(t), []byte("a")); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Get after an empty restart = %v; want ErrNotFound", err)
	}
	err = tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: epoch, Checkpoint: 6, Docs: []engine.Doc{odoc("b", 0, 1, 1, "y")}})
	if !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("Apply with the epoch claimed before the data was lost = %v; want ErrFenced", err)
	}
	tapply(t, tb, 0, 1, odoc("a", 0, 1, 4, "y"))
	if got, err := tb.Get(ctxT(t), []byte("a")); err != nil || got.Version != 1 || got.Index[1].Str != "y" {
		t.Fatalf("Get after writing to the emptied redis = %+v, %v; want version 1, tier y", got, err)
	}
	if _, err := s.OpenTable(ctxT(t), engine.TableSpec{Name: orderSpec.Name}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("OpenTable with other indexes after the claim = %v; want ErrInvalid", err)
	}
}

func TestRouteClientLogs(t *testing.T) {
	var buf testkit.SyncBuffer
	RouteClientLogs(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { RouteClientLogs(nil) })
	url := "redis://127.0.0.1:" + strconv.Itoa(closedPort(t)) + "/0"
	if s, err := Open(ctxT(t), url); err == nil {
		s.Close()
		t.Fatal("Open of a closed port: got nil error")
	}
	testkit.Eventually(t, 5*time.Second, "a go-redis log record", func() error {
		if !strings.Contains(buf.String(), `"component":"go-redis"`) {
			return errors.New("no record yet: " + buf.String())
		}
		return nil
	})
}
