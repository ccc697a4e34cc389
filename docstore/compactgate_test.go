package docstore

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// level0 returns the number of files and sublevels in s's level 0.
func level0(s *Store) (files int64, sublevels int) {
	m := s.kv.(*pebbleKV).db.Metrics()
	return m.Levels[0].TablesCount, int(m.Levels[0].Sublevels)
}

// compactions returns how many compactions s's database has run or runs.
func compactions(s *Store) int64 {
	m := s.kv.(*pebbleKV).db.Metrics()
	return m.Compact.Count + m.Compact.NumInProgress
}

// TestBulkLoadHoldsCompactions restores rounds of the same keys, one
// ingestion each (every file overlaps every other): while the load lasts
// no compaction is granted and level 0 keeps the files; once no batch has
// come for holdIdle they are merged, and every document reads back.
func TestBulkLoadHoldsCompactions(t *testing.T) {
	const rounds = 8
	s, err := Open(t.TempDir(), WithFsync(false), withIngestChunk(100))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tb := mustTable(t, s, ordersSpec)
	var log []engine.DocBatch
	var want []engine.Doc
	for round := range int64(rounds) {
		b := engine.DocBatch{Partition: 0, Checkpoint: (round + 1) * 10, Replay: true}
		for i := range 100 {
			d := orderDoc(i*7, 0, round+1)
			b.Docs = append(b.Docs, d)
			if round == rounds-1 {
				want = append(want, d)
			}
		}
		log = append(log, b)
	}
	c0 := compactions(s)
	replayTable(t, tb, log)
	wantCheckpoints(t, tb, 1, rounds*10) // writes the last buffer out
	if n := s.counts.ingests.Load(); n < rounds {
		t.Fatalf("%d ingestions; the test needs one per round (%d)", n, rounds)
	}
	if n := compactions(s) - c0; n != 0 {
		t.Errorf("%d compactions during the bulk load; want 0", n)
	}
	if files, sub := level0(s); sub < rounds/2 {
		t.Errorf("level 0 during the load: %d files in %d sublevels; want the ingested files unmerged (≥ %d sublevels)", files, sub, rounds/2)
	}
	testkit.Eventually(t, 10*time.Second, "level 0 merged once the load went idle", func() error {
		if files, sub := level0(s); sub > 1 {
			return fmt.Errorf("level 0: %d files in %d sublevels", files, sub)
		}
		return nil
	})
	if !tb.cache.bulk.on || tb.cache.bulk.holding {
		t.Errorf("bulk load on %v, holding %v; want on, not holding, once idle", tb.cache.bulk.on, tb.cache.bulk.holding)
	}
	slices.SortFunc(want, func(a, b engine.Doc) int { return slices.Compare(a.Key, b.Key) })
	wantTableDocs(t, s, tb, want)
}

// TestCompactionGateHold: compactions are held while a bulk load holds
// them and level 0 is below the cap, and let through otherwise.
func TestCompactionGateHold(t *testing.T) {
	for _, tc := range []struct {
		name      string
		holds     int // hold(true) calls
		releases  int // hold(false) calls
		sublevels int // level 0 after the last ingestion
		want      bool
	}{
		{"no load", 0, 0, 0, false},
		{"a load", 1, 0, 3, true},
		{"two loads, one ended", 2, 1, 3, true},
		{"both ended", 2, 2, 3, false},
		{"a load past the cap", 1, 0, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newCompactionGate(slog.New(slog.DiscardHandler))
			g.maxSublevels = 4
			for range tc.holds {
				g.hold(true)
			}
			for range tc.releases {
				g.hold(false)
			}
			g.level0(tc.sublevels)
			if got := g.heldLocked(); got != tc.want {
				t.Errorf("held = %v; want %v", got, tc.want)
			}
		})
	}
}
