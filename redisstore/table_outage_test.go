package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// eachTableOperation calls every table operation once and returns the
// errors by operation name.
func eachTableOperation(ctx context.Context, s *Store, tb *table, epoch int64) map[string]error {
	errs := map[string]error{}
	_, errs["OpenTable"] = s.OpenTable(ctx, orderSpec)
	_, errs["Claim"] = tb.Claim(ctx, 0)
	_, _, errs["Checkpoint"] = tb.Checkpoint(ctx, 0)
	_, errs["Load"] = tb.Load(ctx, [][]byte{[]byte("a"), []byte("b")})
	_, errs["Get"] = tb.Get(ctx, []byte("a"))
	_, errs["Query"] = tb.Query(ctx, engine.IndexQuery{Index: "total", Limit: 10})
	_, errs["QueryTies"] = tb.Query(ctx, engine.IndexQuery{Index: "total", Desc: true, Limit: 10})
	errs["Apply"] = tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Checkpoint: 9,
		Docs: []engine.Doc{odoc("a", 0, 9, 1, "x")}})
	errs["ScanPartition"] = tb.ScanPartition(ctx, 0, func(engine.Doc) error { return nil })
	errs["DropPartition"] = tb.DropPartition(ctx, 7)
	errs["Reset"] = tb.Reset(ctx)
	return errs
}

func TestTableOutage(t *testing.T) {
	r := testkit.StartRedis(t, testkit.WithRedisPersistence(testkit.RedisAOF))
	s := openStore(t, r)
	spec := orderSpec
	spec.TiesAscending = true
	tb := openTable(t, s, spec)
	tapply(t, tb, 0, 5, odoc("a", 0, 1, 1, "x"))
	epoch, err := tb.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("stop redis-server: %v", err)
	}
	for op, err := range eachTableOperation(ctxT(t), s, tb, epoch) {
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("%s while redis is down = %v; want ErrUnavailable", op, err)
		}
		if errors.Is(err, engine.ErrFenced) || errors.Is(err, engine.ErrNotFound) || errors.Is(err, engine.ErrInvalid) {
			t.Errorf("%s while redis is down = %v; must not look like ErrFenced, ErrNotFound or ErrInvalid", op, err)
		}
	}
	if err := r.Start(); err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
	// The same table, not reopened, works again; the claim survived.
	testkit.Eventually(t, 10*time.Second, "Get after redis restarts", func() error {
		_, err := tb.Get(ctxT(t), []byte("a"))
		return err
	})
	if err := tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: epoch, Checkpoint: 6,
		Docs: []engine.Doc{odoc("a", 0, 2, 2, "y")}}); err != nil {
		t.Fatalf("Apply with the epoch claimed before the outage: %v", err)
	}
	wantKeys(t, tb, engine.IndexQuery{Index: "tier", Min: engine.Str("y"), HasMin: true, Limit: 5}, "a")
}
