package memstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
	"github.com/keepstate/keepstate/engine/storetest"
)

func TestTablesConformance(t *testing.T) {
	storetest.RunTables(t, func(t *testing.T) engine.Tables {
		s := memstore.New()
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}

// TestTablesPerStore checks that two stores never share a table of the
// same name, and that a changed index set is reported as such.
func TestTablesPerStore(t *testing.T) {
	ctx := context.Background()
	a, b := memstore.New(), memstore.New()
	ta, err := a.OpenTable(ctx, storetest.MovieShape)
	if err != nil {
		t.Fatalf("OpenTable: %v", err)
	}
	e, err := ta.Claim(ctx, 0)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if err := ta.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 5}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	tb2, err := b.OpenTable(ctx, storetest.MovieShape)
	if err != nil {
		t.Fatalf("OpenTable of another store: %v", err)
	}
	if next, ok, err := tb2.Checkpoint(ctx, 0); err != nil || ok {
		t.Fatalf("Checkpoint in another store = %d, %v, %v; want none", next, ok, err)
	}

	changed := storetest.OrderShape
	changed.Name = storetest.MovieShape.Name
	_, err = a.OpenTable(ctx, changed)
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "index set changed") {
		t.Fatalf("OpenTable with other indexes = %v; want ErrInvalid saying the index set changed", err)
	}
}
