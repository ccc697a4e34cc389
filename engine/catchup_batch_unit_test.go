package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
)

// TestUnitCatchUpBatchesBounded: a standby (or warm-up) catching up
// applies the changelog in batches of at most 1000 documents, so that a
// store holding its write lock for one batch never keeps the actives'
// flushes waiting long; every document still arrives.
func TestUnitCatchUpBatchesBounded(t *testing.T) {
	c := newCluster(t)
	cfg := unitConfig(c, engine.ExactlyOnce)
	cfg.Partitions = 3
	a := newRig(t, c, cfg, memstore.New(memstore.Local())).start(t)
	eventually(t, "a runs every partition", owns(a.e, 0, 1, 2))
	const perPart, catchUpMax = 2500, 1000
	var sent []rating
	for p := range int32(3) {
		for _, id := range moviesOf(p, 3, perPart) {
			sent = append(sent, rating{id, 7})
		}
	}
	a.rate(t, 0, sent...)
	eventually(t, "a stores every rating", a.storeHas(totals(sent)))

	// b joins after the changelog holds every document: its standbys
	// and warm-ups replay 2500 documents of each partition in one
	// catch-up.
	cfgB := cfg
	cfgB.AdvertiseAddr = "127.0.0.1:7002"
	b := newRig(t, c, cfgB, memstore.New(memstore.Local()))
	sizes := &batchSizes{Table: b.store.Table}
	b.store.Table = sizes
	b.start(t)
	eventually(t, "b has a copy of every document", func() error {
		if got := sizes.replayedDocs(); got != len(sent) {
			return fmt.Errorf("b applied %d documents in replays, want %d (b: %d standbys, partitions %v)",
				got, len(sent), b.e.Stats().PartitionsStandby, b.e.Partitions())
		}
		return nil
	})
	for p := range int32(3) {
		if got := sizes.largest(p); got > catchUpMax {
			t.Errorf("partition %d: largest catch-up batch %d documents, want at most %d", p, got, catchUpMax)
		}
	}
}

// batchSizes is a table that records the sizes of replay batches, by
// partition.
type batchSizes struct {
	engine.Table
	mu    sync.Mutex
	sizes map[int32][]int
}

// Apply records a replay batch's size and applies it.
func (s *batchSizes) Apply(ctx context.Context, b engine.DocBatch) error {
	if b.Replay {
		s.mu.Lock()
		if s.sizes == nil {
			s.sizes = map[int32][]int{}
		}
		s.sizes[b.Partition] = append(s.sizes[b.Partition], len(b.Docs))
		s.mu.Unlock()
	}
	return s.Table.Apply(ctx, b)
}

// InstanceLocal reports the wrapped table's locality (standbys need it).
func (s *batchSizes) InstanceLocal() bool { return s.Table.(engine.InstanceLocal).InstanceLocal() }

// replayedDocs is how many documents the replay batches held in all.
func (s *batchSizes) replayedDocs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, xs := range s.sizes {
		for _, x := range xs {
			n += x
		}
	}
	return n
}

// largest is the most documents of one replay batch of partition p.
func (s *batchSizes) largest(p int32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := 0
	for _, x := range s.sizes[p] {
		m = max(m, x)
	}
	return m
}
