package redisstore

import (
	"errors"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestTableLostWritesFence: Redis goes back to an earlier state of a
// partition (its last batch, checkpoint and documents), as after a
// failover to a replica that lacked the latest writes, while the epoch
// stays. The next batch of the writer is refused with ErrFenced instead of
// being written on top of the hole; after a new claim the writer goes on
// from the older checkpoint.
func TestTableLostWritesFence(t *testing.T) {
	r := testkit.StartRedis(t)
	_, tb := openOrders(t, r)
	ctx := ctxT(t)
	e, err := tb.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(next int64, d engine.Doc) error {
		return tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: next, Docs: []engine.Doc{d}})
	}
	if err := apply(1, odoc("a", 0, 1, 1, "x")); err != nil {
		t.Fatal(err)
	}
	before := redisCmd(t, r, "GET", tb.keys.batch(0))
	if err := apply(2, odoc("b", 0, 1, 2, "x")); err != nil {
		t.Fatal(err)
	}
	// The second batch is lost: token and checkpoint go back.
	redisCmd(t, r, "SET", tb.keys.batch(0), before)
	redisCmd(t, r, "SET", tb.keys.checkpoint(0), "1")
	redisCmd(t, r, "DEL", tb.keys.doc(0, []byte("b")))
	err = apply(3, odoc("c", 0, 1, 3, "x"))
	if !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("Apply after Redis lost a batch = %v; want ErrFenced", err)
	}
	if cp, _, _ := tb.Checkpoint(ctx, 0); cp != 1 {
		t.Errorf("checkpoint after the refused batch = %d, want 1", cp)
	}
	if e, err = tb.Claim(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := apply(2, odoc("b", 0, 1, 2, "x")); err != nil {
		t.Fatalf("Apply after a new claim: %v", err)
	}
	if err := apply(3, odoc("c", 0, 1, 3, "x")); err != nil {
		t.Fatalf("the next Apply: %v", err)
	}
}
