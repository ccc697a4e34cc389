package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// outage is how long the outage tests keep redis-server stopped.
const outage = 10 * time.Second

// eachOperation calls every Store operation once and returns the errors by
// operation name.
func eachOperation(ctx context.Context, s *Store, epoch int64) map[string]error {
	errs := map[string]error{}
	_, errs["Claim"] = s.Claim(ctx, 0)
	_, _, errs["Checkpoint"] = s.Checkpoint(ctx, 0)
	_, errs["Load"] = s.Load(ctx, []int64{1, 2})
	_, errs["Get"] = s.Get(ctx, 1)
	_, errs["Range"] = s.Range(ctx, engine.RangeQuery{MinAvg: 0, MaxAvg: math.Inf(1), Limit: 10})
	errs["Apply"] = s.Apply(ctx, engine.Batch{Partition: 0, Epoch: epoch, Checkpoint: 99,
		Docs: []engine.MovieStats{movie(1, 0, 9, 9, 99)}})
	errs["ScanPartition"] = s.ScanPartition(ctx, 0, func(engine.MovieStats) error { return nil })
	errs["DropPartition"] = s.DropPartition(ctx, 7)
	errs["Ping"] = s.Ping(ctx)
	// Reset is left out: it would delete the data checked after the outage.
	return errs
}

func TestOutageThenRecovery(t *testing.T) {
	r := testkit.StartRedis(t, testkit.WithRedisPersistence(testkit.RedisAOF))
	s := openStore(t, r)
	apply(t, s, 0, 5, movie(1, 0, 2, 10, 5), movie(2, 0, 1, 9, 6))
	epoch, err := s.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}

	if err := r.Stop(); err != nil {
		t.Fatalf("stop redis-server: %v", err)
	}
	down := time.Now()
	for op, err := range eachOperation(ctxT(t), s, epoch) {
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("%s while redis is down = %v; want ErrUnavailable", op, err)
		}
		if errors.Is(err, engine.ErrFenced) || errors.Is(err, engine.ErrNotFound) {
			t.Errorf("%s while redis is down = %v; must not look like ErrFenced or ErrNotFound", op, err)
		}
	}
	t.Logf("every operation failed with ErrUnavailable within %v", time.Since(down))
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(outage - time.Since(down)) // the rest of the outage, not a wait for a condition
		restarted <- r.Start()
	}()
	// Calls keep failing, without reopening anything, until redis is back.
	if _, err := s.Get(ctxT(t), 1); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("Get during the outage = %v; want ErrUnavailable", err)
	}

	// The same store, not reopened, works again once redis is back.
	testkit.Eventually(t, 3*outage, "Get after redis restarts", func() error {
		_, err := s.Get(ctxT(t), 1)
		return err
	})
	if err := <-restarted; err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
	got, err := s.Get(ctxT(t), 1)
	if err != nil || got.Count != 2 || got.Sum != 10 {
		t.Fatalf("Get after the outage = %+v, %v; want the data from before (count 2, sum 10)", got, err)
	}
	// Redis forgot the scripts: EVALSHA must fall back to EVAL.
	if err := s.Apply(ctxT(t), engine.Batch{Partition: 0, Epoch: epoch, Checkpoint: 9,
		Docs: []engine.MovieStats{movie(1, 0, 3, 20, 7)}}); err != nil {
		t.Fatalf("Apply after the outage: %v", err)
	}
	page, err := s.Range(ctxT(t), engine.RangeQuery{MinAvg: 0, MaxAvg: math.Inf(1), Limit: 10})
	if err != nil || len(page.Movies) != 2 || page.Movies[0].MovieID != 2 || page.Movies[1].MovieID != 1 {
		t.Fatalf("Range after the outage = %v, %v; want movies 2 (avg 9) then 1 (avg 6.67)", page.Movies, err)
	}
	if next, ok, err := s.Checkpoint(ctxT(t), 0); err != nil || !ok || next != 9 {
		t.Fatalf("Checkpoint after the outage = %d, %v, %v; want 9, true", next, ok, err)
	}
}

func TestRedisComesBackEmpty(t *testing.T) {
	r := testkit.StartRedis(t, testkit.WithRedisPersistence(testkit.RedisAOF))
	s := openStore(t, r)
	apply(t, s, 0, 5, movie(1, 0, 2, 10, 5))
	if err := r.RestartEmpty(); err != nil {
		t.Fatalf("restart redis-server without its data: %v", err)
	}
	// The first call may hit a pooled connection the restart closed; the
	// client retries it. The answer must then be "nothing stored", which
	// makes the engine restore from the changelog.
	testkit.Eventually(t, 10*time.Second, "Checkpoint after an empty restart", func() error {
		_, ok, err := s.Checkpoint(ctxT(t), 0)
		if err == nil && ok {
			return errors.New("checkpoint still present")
		}
		return err
	})
	if _, err := s.Get(ctxT(t), 1); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Get after an empty restart = %v; want ErrNotFound", err)
	}
	apply(t, s, 0, 1, movie(1, 0, 1, 4, 1))
	if got, err := s.Get(ctxT(t), 1); err != nil || got.Sum != 4 {
		t.Fatalf("Get after writing to the emptied redis = %+v, %v; want sum 4", got, err)
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
