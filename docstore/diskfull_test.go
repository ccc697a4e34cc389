package docstore

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestDiskFull fills the store's volume: the batch that does not fit fails
// as ErrUnavailable (so the engine retries it instead of restarting its
// session) naming the full disk, leaves no trace (checkpoint, documents and
// index are those of the last whole batch), and goes through once the
// volume is grown; the store then reopens consistent.
func TestDiskFull(t *testing.T) {
	// The volume holds the default reserve and 64 MiB of store.
	vol := testkit.SmallVolume(t, DefaultDiskReserve+64<<20)
	ctx := context.Background()
	s, err := Open(vol.Dir) // fsync on, the default
	if err != nil {
		t.Fatalf("Open on a small volume: %v", err)
	}
	defer func() { s.Close() }()
	tb := mustTable(t, s, ordersSpec)
	epoch, err := tb.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	const perBatch = 200
	batch := func(k int64) engine.DocBatch {
		docs := make([]engine.Doc, perBatch)
		for i := range docs {
			docs[i] = orderDoc(int(k)*perBatch+i, 0, k)
		}
		return engine.DocBatch{Epoch: epoch, Docs: docs, Checkpoint: k}
	}

	var full int64
	var applyErr error
	for k := int64(1); k <= 10000 && full == 0; k++ {
		if applyErr = tb.Apply(ctx, batch(k)); applyErr != nil {
			full = k
		}
	}
	if full == 0 {
		t.Fatal("10000 batches fit on a small volume; want it full")
	}
	if full == 1 {
		t.Fatalf("the first batch failed: %v; want some to fit", applyErr)
	}
	if !errors.Is(applyErr, engine.ErrUnavailable) || !errors.Is(applyErr, syscall.ENOSPC) {
		t.Fatalf("Apply on a full volume = %v; want ErrUnavailable wrapping ENOSPC", applyErr)
	}
	t.Logf("batch %d did not fit: %v", full, applyErr)

	check := func(wantNext int64) {
		t.Helper()
		next, ok, err := tb.Checkpoint(ctx, 0)
		if err != nil || !ok || next != wantNext {
			t.Fatalf("checkpoint = %d, %v, %v; want %d", next, ok, err, wantNext)
		}
		last := batch(wantNext).Docs[perBatch-1]
		if got, err := tb.Get(ctx, last.Key); err != nil || !sameTableDoc(got, last) {
			t.Fatalf("key %q of the last whole batch: %+v, %v; want %+v", last.Key, got, err, last)
		}
		if _, err := tb.Get(ctx, batch(wantNext + 1).Docs[0].Key); !errors.Is(err, engine.ErrNotFound) {
			t.Fatalf("key of the batch after it: %v; want ErrNotFound", err)
		}
		if _, err := rawTableState(s, tb); err != nil {
			t.Fatalf("keys after checkpoint %d: %v", wantNext, err)
		}
	}
	check(full - 1)

	// Still full: a retry fails the same way and changes nothing.
	if err := tb.Apply(ctx, batch(full)); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("retry on the full volume = %v; want ErrUnavailable", err)
	}
	check(full - 1)

	vol.Resize(t, DefaultDiskReserve+128<<20)
	if err := tb.Apply(ctx, batch(full)); err != nil {
		t.Fatalf("Apply after growing the volume: %v", err)
	}
	check(full)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(vol.Dir); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	tb = mustTable(t, s, ordersSpec)
	check(full)
}
