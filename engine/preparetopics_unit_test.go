package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
	"github.com/keepstate/keepstate/movies"
)

// TestPrepareTopicsGivesTheTablePartitions: PrepareTopics creates the
// engine's topics and returns their partition count, and Run refuses a
// table opened for another count (its store would look for documents in
// the wrong partitions).
func TestPrepareTopicsGivesTheTablePartitions(t *testing.T) {
	c := newCluster(t)
	cfg := unitConfig(c, engine.AtLeastOnce)
	cfg.Partitions = 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := engine.PrepareTopics(ctx, cfg)
	if err != nil || n != 3 {
		t.Fatalf("PrepareTopics = %d, %v; want 3", n, err)
	}
	if again, err := engine.PrepareTopics(ctx, cfg); err != nil || again != 3 {
		t.Fatalf("PrepareTopics again = %d, %v; want 3", again, err)
	}

	spec := movies.Spec
	spec.Partitions = 2
	tb, err := memstore.New().OpenTable(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	e, err := newMovieEngine(cfg, tb, &unitSerde{})
	if err != nil {
		t.Fatal(err)
	}
	err = e.Run(ctx)
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "opened for 2 partitions") {
		t.Fatalf("Run with a table opened for 2 partitions of 3 = %v; want ErrInvalid naming them", err)
	}
}
