package docstore

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestTableSurvivesReopen closes and reopens the store: documents, index
// entries, checkpoints, epochs (the next claim is higher) and the spec
// (another index set is refused) are all still there.
func TestTableSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(dir) // fsync on, the default
	if err != nil {
		t.Fatal(err)
	}
	tb := mustTable(t, s, ordersSpec)
	var docs []engine.Doc
	for i := range 300 {
		docs = append(docs, orderDoc(i, int32(i%3), 1))
	}
	for p := range int32(3) {
		var part []engine.Doc
		for _, d := range docs {
			if d.Partition == p {
				part = append(part, d)
			}
		}
		applyDocs(t, tb, p, int64(100+p), part...)
	}
	// Rewrite some documents so that index entries move.
	var moved []engine.Doc
	for i := 0; i < 300; i += 21 { // partition 0 only
		docs[i] = orderDoc(i, 0, 2)
		moved = append(moved, docs[i])
	}
	applyDocs(t, tb, 0, 200, moved...)
	epochs := map[int32]int64{}
	for p := range int32(3) {
		if epochs[p], err = tb.Claim(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	if s, err = Open(dir); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.OpenTable(ctx, engine.TableSpec{Name: "orders", Indexes: ordersSpec.Indexes[:1]}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("reopening with one index of two = %v; want ErrInvalid", err)
	}
	tb = mustTable(t, s, ordersSpec)
	wantTableDocs(t, s, tb, docs)
	for p, want := range map[int32]int64{0: 200, 1: 101, 2: 102} {
		if got, ok, err := tb.Checkpoint(ctx, p); err != nil || !ok || got != want {
			t.Fatalf("Checkpoint(%d) = %d, %v, %v; want %d", p, got, ok, err, want)
		}
	}
	for p, last := range epochs {
		got, err := tb.Claim(ctx, p)
		if err != nil || got != last+1 {
			t.Fatalf("Claim(%d) after reopen = %d, %v; want %d", p, got, err, last+1)
		}
		if err := tb.Apply(ctx, engine.DocBatch{Partition: p, Epoch: last, Checkpoint: 1}); !errors.Is(err, engine.ErrFenced) {
			t.Fatalf("Apply with the epoch claimed before the reopen = %v; want ErrFenced", err)
		}
	}
}

// errInjected is the failure faultKV injects.
var errInjected = errors.New("injected failure")

// faultKV is the store's engine with failures on demand: every batch's
// write number failAt (1-based; 0: never) fails, or its commit when
// failCommit is set. writes counts the keys all batches wrote (sets and
// deletions, failed ones included).
type faultKV struct {
	kv
	failAt     atomic.Int64
	failCommit atomic.Bool
	writes     atomic.Int64
}

func (f *faultKV) batch() kvBatch { return &faultBatch{kvBatch: f.kv.batch(), f: f} }
func (f *faultKV) writeBatch(size int) kvBatch {
	return &faultBatch{kvBatch: f.kv.writeBatch(size), f: f}
}

type faultBatch struct {
	kvBatch
	f      *faultKV
	writes int64
}

func (b *faultBatch) hit() bool {
	b.f.writes.Add(1)
	b.writes++
	return b.writes == b.f.failAt.Load()
}

func (b *faultBatch) set(k, v []byte) error {
	if b.hit() {
		return errInjected
	}
	return b.kvBatch.set(k, v)
}

func (b *faultBatch) del(k []byte) error {
	if b.hit() {
		return errInjected
	}
	return b.kvBatch.del(k)
}

func (b *faultBatch) commit(sync bool) error {
	if b.f.failCommit.Load() {
		return errInjected
	}
	return b.kvBatch.commit(sync)
}

// withFaultKV opens the store on a faultKV over Pebble and sets *fault to
// it.
func withFaultKV(fault **faultKV) Option {
	return func(o *options) {
		o.openKV = func(path string, o options, log *slog.Logger, mustExist bool) (kv, error) {
			p, err := openPebble(path, o, log, mustExist)
			if err != nil {
				return nil, err
			}
			*fault = &faultKV{kv: p}
			return *fault, nil
		}
	}
}

// TestTableApplyIsAtomicOnFailure fails batches part way through their
// writes and at commit: nothing of them is visible (documents, index
// entries, members, collection size, checkpoint), and the same batch goes
// through once the fault is gone.
func TestTableApplyIsAtomicOnFailure(t *testing.T) {
	var fault *faultKV
	s := openTemp(t, WithFsync(false), withFaultKV(&fault))
	defer s.Close()
	ctx := context.Background()
	tb := mustTable(t, s, ordersSpec)
	var docs []engine.Doc
	for i := range 40 {
		docs = append(docs, orderDoc(i, 0, 1))
	}
	applyDocs(t, tb, 0, 1, docs...)
	epoch, err := tb.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Half of them move, half are new.
	var next []engine.Doc
	for i := 20; i < 60; i++ {
		next = append(next, orderDoc(i, 0, 2))
	}
	batch := engine.DocBatch{Partition: 0, Epoch: epoch, Docs: next, Checkpoint: 2}
	cases := []struct {
		name   string
		inject func()
	}{
		{"first write", func() { fault.failAt.Store(1) }},
		{"mid batch", func() { fault.failAt.Store(57) }},
		{"late write", func() { fault.failAt.Store(int64(len(next)*4 - 1)) }},
		{"commit", func() { fault.failCommit.Store(true) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.inject()
			err := tb.Apply(ctx, batch)
			fault.failAt.Store(0)
			fault.failCommit.Store(false)
			if !errors.Is(err, errInjected) {
				t.Fatalf("Apply with a fault at the %s = %v; want the injected failure", tc.name, err)
			}
			wantTableDocs(t, s, tb, docs)
			if got, _, err := tb.Checkpoint(ctx, 0); err != nil || got != 1 {
				t.Fatalf("Checkpoint = %d, %v; want 1 (the failed batch's is 2)", got, err)
			}
		})
	}
	if err := tb.Apply(ctx, batch); err != nil {
		t.Fatalf("Apply without a fault: %v", err)
	}
	want := append(docs[:20:20], next...)
	wantTableDocs(t, s, tb, want)
}

// TestTablesAreIndependent writes two tables of one store: a drop, a
// reset and writes of one leave the other's documents, index entries and
// checkpoints as they were, before and after a reopen.
func TestTablesAreIndependent(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	scoresSpec := engine.TableSpec{Name: "scores", Indexes: []engine.IndexSpec{{Name: "avg", Kind: engine.IndexNumber}}}
	orders, scores := mustTable(t, s, ordersSpec), mustTable(t, s, scoresSpec)
	var od, sd []engine.Doc
	for i := range 100 {
		od = append(od, orderDoc(i, 0, 1))
		sd = append(sd, engine.Doc{Key: []byte{byte(i)}, Version: 1, Value: []byte("m"), Index: []engine.IndexValue{engine.Num(float64(i % 10))}})
	}
	applyDocs(t, orders, 0, 7, od...)
	applyDocs(t, scores, 0, 9, sd...)
	check := func(wantOrders, wantScores []engine.Doc) {
		t.Helper()
		wantTableDocs(t, s, orders, wantOrders)
		wantTableDocs(t, s, scores, wantScores)
	}
	check(od, sd)

	if err := orders.DropPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	check(nil, sd)
	applyDocs(t, orders, 0, 8, od...)
	if err := scores.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	check(od, nil)
	if got, ok, err := orders.Checkpoint(ctx, 0); err != nil || !ok || got != 8 {
		t.Fatalf("orders checkpoint after the other table's reset = %d, %v, %v; want 8", got, ok, err)
	}
	if _, ok, err := scores.Checkpoint(ctx, 0); err != nil || ok {
		t.Fatalf("table checkpoint after its reset: ok %v, %v; want none", ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	if s, err = Open(dir, WithFsync(false)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	orders, scores = mustTable(t, s, ordersSpec), mustTable(t, s, scoresSpec)
	check(od, nil)
	applyDocs(t, scores, 0, 10, sd[:5]...)
	check(od, sd[:5])
}

// TestTableCommitFailureEmptiesTheWriteCache fails a table batch at its
// commit, which may have been written after all: the tables' write cache
// (filled by a Load) is emptied, so the next write reads the stored
// documents instead of trusting what the cache held before.
func TestTableCommitFailureEmptiesTheWriteCache(t *testing.T) {
	var fault *faultKV
	s := openTemp(t, WithFsync(false), withFaultKV(&fault))
	defer s.Close()
	ctx := context.Background()
	tb := mustTable(t, s, ordersSpec)
	<-tb.cache.warmed // of the empty table: it adds nothing later
	var docs, next []engine.Doc
	var keys [][]byte
	for i := range 40 {
		docs = append(docs, orderDoc(i, 0, 1))
		next = append(next, orderDoc(i, 0, 2))
		keys = append(keys, docs[i].Key)
	}
	applyDocs(t, tb, 0, 1, docs...)
	if _, err := tb.Load(ctx, keys); err != nil {
		t.Fatal(err)
	}
	cachedKeys := func() int {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		return s.tcache.of(ordersSpec.Name).m.len()
	}
	if got := cachedKeys(); got != len(keys) {
		t.Fatalf("write cache holds %d keys after the Load; want %d", got, len(keys))
	}
	epoch, err := tb.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	fault.failCommit.Store(true)
	err = tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: next, Checkpoint: 2})
	fault.failCommit.Store(false)
	if !errors.Is(err, errInjected) {
		t.Fatalf("Apply with a failing commit = %v; want the injected failure", err)
	}
	if got := cachedKeys(); got != 0 {
		t.Errorf("write cache holds %d keys after a failed commit; want 0", got)
	}
	reads := s.counts.writeReads.Load()
	if err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: next, Checkpoint: 2}); err != nil {
		t.Fatal(err)
	}
	if got := s.counts.writeReads.Load() - reads; got != int64(len(next)) {
		t.Errorf("the retry read %d documents; want %d (the cache was emptied)", got, len(next))
	}
	wantTableDocs(t, s, tb, next)
}
