package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// Opener returns a fresh, empty store for one sub-test. The suite closes it.
type Opener func(t *testing.T) engine.Store

// Run runs the conformance suite against stores returned by open. Every
// sub-test opens its own store, so open must return an empty one each time.
// The whole suite is meant to take well under five seconds per store.
func Run(t *testing.T, open func(t *testing.T) engine.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"RoundTrip", testRoundTrip},
		{"LoadMissing", testLoadMissing},
		{"GetMissing", testGetMissing},
		{"CheckpointMissing", testCheckpointMissing},
		{"ApplyInvalidIsAtomic", testApplyInvalid},
		{"VersionFencing", testVersionFencing},
		{"ReplaySkipsStale", testReplaySkipsStale},
		{"EpochFencing", testEpochFencing},
		{"DropPartition", testDropPartition},
		{"RangeOrderAndTies", testRangeOrder},
		{"RangeBounds", testRangeBounds},
		{"RangeLimit", testRangeLimit},
		{"RangePaging", testRangePaging},
		{"RangeAfterArbitraryCursor", testRangeAfterCursor},
		{"RangeInvalid", testRangeInvalid},
		{"RangeAvgMoves", testRangeAvgMoves},
		{"ConcurrentReadersSeeWholeBatches", testConcurrentReaders},
		{"PartitionScanner", testPartitionScanner},
		{"Resetter", testResetter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
}

// fresh opens a store for the current (sub-)test and closes it at cleanup.
func fresh(t *testing.T, open Opener) engine.Store {
	t.Helper()
	s := open(t)
	if s == nil {
		t.Fatal("open returned a nil store")
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// ctx returns a context bounded by a deadline so that a hanging store fails
// the test instead of blocking it forever.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// doc builds a valid document.
func doc(id int64, p int32, count int64, sum float64, version int64) engine.MovieStats {
	return engine.MovieStats{MovieID: id, Partition: p, Count: count, Sum: sum, Version: version,
		Sources: map[int32]int64{0: version}}
}

// claim claims p and fails the test on error.
func claim(t *testing.T, s engine.Store, p int32) int64 {
	t.Helper()
	e, err := s.Claim(ctx(t), p)
	if err != nil {
		t.Fatalf("Claim(%d): %v", p, err)
	}
	return e
}

// mustApply claims the partition (once per call, so epochs stay current) and
// applies docs with checkpoint next.
func mustApply(t *testing.T, s engine.Store, p int32, next int64, docs ...engine.MovieStats) {
	t.Helper()
	b := engine.Batch{Partition: p, Epoch: claim(t, s, p), Docs: docs, Checkpoint: next}
	if err := s.Apply(ctx(t), b); err != nil {
		t.Fatalf("Apply(partition %d, %d docs, checkpoint %d): %v", p, len(docs), next, err)
	}
}

// wantCheckpoint asserts the checkpoint of p.
func wantCheckpoint(t *testing.T, s engine.Store, p int32, want int64, wantOK bool) {
	t.Helper()
	got, ok, err := s.Checkpoint(ctx(t), p)
	if err != nil {
		t.Fatalf("Checkpoint(%d): %v", p, err)
	}
	if ok != wantOK || (ok && got != want) {
		t.Fatalf("Checkpoint(%d) = %d, %v; want %d, %v", p, got, ok, want, wantOK)
	}
}

// wantDoc asserts that Get returns want.
func wantDoc(t *testing.T, s engine.Store, want engine.MovieStats) {
	t.Helper()
	got, err := s.Get(ctx(t), want.MovieID)
	if err != nil {
		t.Fatalf("Get(%d): %v", want.MovieID, err)
	}
	if !sameStats(got, want) {
		t.Fatalf("Get(%d) = %s; want %s", want.MovieID, show(got), show(want))
	}
}

// wantAbsent asserts that Get returns ErrNotFound for id.
func wantAbsent(t *testing.T, s engine.Store, id int64) {
	t.Helper()
	got, err := s.Get(ctx(t), id)
	if !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Get(%d) = %s, %v; want ErrNotFound", id, show(got), err)
	}
}

// sameStats compares two documents field by field; a nil and an empty
// Sources map are equal. Floats compare bit for bit (0 and -0 are equal).
func sameStats(a, b engine.MovieStats) bool {
	if a.MovieID != b.MovieID || a.Partition != b.Partition || a.Count != b.Count ||
		a.Version != b.Version || !(a.Sum == b.Sum) {
		return false
	}
	if len(a.Sources) != len(b.Sources) {
		return false
	}
	return len(a.Sources) == 0 || maps.Equal(a.Sources, b.Sources)
}

func show(m engine.MovieStats) string {
	return fmt.Sprintf("{movie %d partition %d count %d sum %v avg %v version %d sources %v}",
		m.MovieID, m.Partition, m.Count, m.Sum, m.Avg(), m.Version, m.Sources)
}

func showIDs(ms []engine.MovieStats) []int64 {
	ids := make([]int64, len(ms))
	for i, m := range ms {
		ids[i] = m.MovieID
	}
	return ids
}

// all is a query matching every finite average.
func all(limit int) engine.RangeQuery {
	return engine.RangeQuery{MinAvg: math.Inf(-1), MaxAvg: math.Inf(1), Limit: limit}
}
