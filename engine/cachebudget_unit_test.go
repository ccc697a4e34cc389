package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// TestUnitCacheBudgetSharesOut runs two partitions under a 600-document
// budget with a per-partition bound (10000) and a commit interval too long
// to matter: only the budget's share (300 each) can flush them, so the
// store fills in flushes of 300 per partition. Without the budget nothing
// is stored; an undivided budget (600 per partition) would not flush the
// ~500 movies each partition gets. The budget comes from the Config, or
// from SetCacheBudget on a running engine started without one (as the
// memory governor sets it).
func TestUnitCacheBudgetSharesOut(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	for _, tc := range []struct {
		name           string
		config, setRun int
	}{
		{"from the config", 600, 0},
		{"set while running", 0, 600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := unitConfig(nil, engine.ExactlyOnce)
			cfg.Partitions = 2
			cfg.CommitInterval = time.Hour
			cfg.IdleFlush = 0
			cfg.CacheMaxDocs = 10000
			cfg.CacheBudgetDocs = tc.config
			r := newRig(t, nil, cfg, nil).start(t)
			if tc.setRun > 0 {
				r.e.SetCacheBudget(tc.setRun)
				if got := r.e.CacheBudget(); got != tc.setRun {
					t.Fatalf("CacheBudget() = %d; want %d", got, tc.setRun)
				}
			}
			const movies = 1000
			var ratings []rating
			for m := int64(1); m <= movies; m++ {
				ratings = append(ratings, rating{m, float64(m%10 + 1)})
			}
			r.rate(t, 0, ratings[:movies/2]...)
			r.rate(t, 1, ratings[movies/2:]...)
			want := totals(ratings)
			eventually(t, "two flushes of a 300-document share", func() error {
				stored := 0
				for id, w := range want {
					got, err := r.store.movie(context.Background(), id)
					if err != nil {
						continue // not flushed (yet)
					}
					if got.Count != w.Count || got.Sum != w.Sum {
						return fmt.Errorf("movie %d: got count %d sum %v, want count %d sum %v", id, got.Count, got.Sum, w.Count, w.Sum)
					}
					stored++
				}
				if stored < 2*300 {
					return fmt.Errorf("%d movies stored; want at least 600 (a 300-document flush per partition)", stored)
				}
				return nil
			})
		})
	}
}
