package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

func testTableScanner(t *testing.T, open TablesOpener, sh shape) {
	_, tb := openTable(t, open, sh.spec)
	sc, ok := tb.(engine.TableScanner)
	if !ok {
		t.Skip("table does not implement engine.TableScanner")
	}
	p0 := tableData(sh, 1, 40, 0)
	p1 := tableData(sh, 2, 30, 1)
	tapply(t, tb, 0, 1, p0...)
	tapply(t, tb, 1, 1, p1...)
	tapply(t, tb, 3, 1) // a checkpoint but no documents

	wantTScan(t, sc, sh.spec, 0, tmodelOf(p0))
	wantTScan(t, sc, sh.spec, 1, tmodelOf(p1))
	wantTScan(t, sc, sh.spec, 2, tmodel{})
	wantTScan(t, sc, sh.spec, 3, tmodel{})

	stop := errors.New("stop here")
	calls := 0
	err := sc.ScanPartition(ctx(t), 0, func(engine.Doc) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 3 {
		t.Fatalf("ScanPartition with a failing callback = %v after %d calls; want the callback's error after 3", err, calls)
	}
	// Updates and drops show in later scans.
	upd := p1[0].Clone()
	upd.Version += 100
	upd.Index = index(sh.spec, 42, "updated")
	tapply(t, tb, 1, 2, upd)
	p1[0] = upd
	wantTScan(t, sc, sh.spec, 1, tmodelOf(p1))
	tdrop(t, tb, 0)
	wantTScan(t, sc, sh.spec, 0, tmodel{})
	wantTScan(t, sc, sh.spec, 1, tmodelOf(p1))
}

// wantTScan asserts that ScanPartition(p) visits exactly the documents of want, each once.
func wantTScan(t *testing.T, sc engine.TableScanner, spec engine.TableSpec, p int32, want tmodel) {
	t.Helper()
	seen := map[string]engine.Doc{}
	err := sc.ScanPartition(ctx(t), p, func(d engine.Doc) error {
		if _, dup := seen[string(d.Key)]; dup {
			return errors.New("doc " + showKey(d.Key) + " seen twice")
		}
		seen[string(d.Key)] = d
		return nil
	})
	if err != nil {
		t.Fatalf("ScanPartition(%d): %v", p, err)
	}
	wantTDocs(t, fmt.Sprintf("ScanPartition(%d)", p), spec, seen, want)
}

func testTableResetter(t *testing.T, open TablesOpener, sh shape) {
	ts, tb := openTable(t, open, sh.spec)
	r, ok := tb.(engine.TableResetter)
	if !ok {
		t.Skip("table does not implement engine.TableResetter")
	}
	siblingSpec := cloneSpec(sh.spec)
	siblingSpec.Name += "_sibling"
	sibling := mustOpen(t, ts, siblingSpec)
	kept := tdoc(sh, 1, 0, 9, 1, "kept")
	tapply(t, sibling, 0, 77, kept)

	docs := tableData(sh, 3, 20, 0)
	tapply(t, tb, 0, 5, docs...)
	other := tdoc(sh, 5_000_000, 1, 1, 1, "a")
	tapply(t, tb, 1, 6, other)
	var before [2]int64
	for p := range before {
		before[p] = tclaim(t, tb, int32(p))
	}
	siblingEpoch := tclaim(t, sibling, 0)

	if err := r.Reset(ctx(t)); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	// Epochs survive a reset: a writer still holding an old epoch (a
	// zombie of the reset application) stays fenced.
	var after [2]int64
	for p := range after {
		if after[p] = tclaim(t, tb, int32(p)); after[p] <= before[p] {
			t.Fatalf("Claim(%d) after Reset = %d; want an epoch above %d", p, after[p], before[p])
		}
	}
	zombie := tdoc(sh, 2, 0, 1, 1, "zombie")
	wantApply(t, tb, tbatch(0, before[0], 9, zombie), engine.ErrFenced, "with the epoch claimed before Reset")
	wantTAbsent(t, tb, docKeys(append(docs, other, zombie))...)
	wantTCheckpoint(t, tb, 0, 0, false)
	wantTCheckpoint(t, tb, 1, 0, false)
	wantTIndexes(t, tb, sh, tmodel{}, 100, false, true)
	if sc, ok := tb.(engine.TableScanner); ok {
		wantTScan(t, sc, sh.spec, 0, tmodel{})
	}
	// Another table of the store is untouched, its epoch still current.
	wantTDoc(t, sibling, kept)
	wantTCheckpoint(t, sibling, 0, 77, true)
	wantApply(t, sibling, tbatch(0, siblingEpoch, 78), nil, "to another table after Reset")
	// The table is usable after a reset, and old versions are accepted again.
	again := docs[0].Clone()
	again.Version, again.Value = 1, []byte("again")
	wantApply(t, tb, tbatch(0, after[0], 1, again), nil, "after Reset")
	wantTDoc(t, tb, again)
	wantTCheckpoint(t, tb, 0, 1, true)
	wantTIndexes(t, tb, sh, tmodelOf([]engine.Doc{again}), 10, false)
}

// filteredTable is a Table whose Query is QueryFiltered with keep.
type filteredTable struct {
	engine.Table
	fq   engine.FilteredQuerier
	keep func(key []byte) bool
}

func (f filteredTable) Query(ctx context.Context, q engine.IndexQuery) (engine.DocPage, error) {
	return f.fq.QueryFiltered(ctx, q, f.keep)
}

// keepOnly returns a keep function accepting the keys of parts, and the documents of md it keeps.
func keepOnly(md tmodel, parts ...int32) (func(key []byte) bool, tmodel) {
	keep := func(key []byte) bool { return slices.Contains(parts, engine.PartitionFor(key, Partitions)) }
	out := tmodel{}
	for k, d := range md {
		if keep(d.Key) {
			out[k] = d
		}
	}
	return keep, out
}

// checkFiltered runs wantTQueries keeping each set of partitions in turn.
func checkFiltered(t *testing.T, tb engine.Table, md tmodel, sh shape) {
	t.Helper()
	fq, ok := tb.(engine.FilteredQuerier)
	if !ok {
		t.Skip("table does not implement engine.FilteredQuerier")
	}
	for _, parts := range [][]int32{{0, 2}, {1}, {}} {
		keep, want := keepOnly(md, parts...)
		wantTQueries(t, filteredTable{Table: tb, fq: fq, keep: keep}, want, sh, []int{1, 4, 100}, 3, 2)
	}
}

func testTableFilteredQuerier(t *testing.T, open TablesOpener, sh shape) {
	tb, md := seededTable(t, open, sh, 80)
	checkFiltered(t, tb, md, sh)
}
