package docstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/boltstore"
)

// TestOpenMigratesBboltStore writes a store in the old bbolt format (v1,
// what keepstate wrote before this engine) and opens it: every document,
// checkpoint and claim epoch must be there, the index must agree with the
// documents, and the old file must be gone.
func TestOpenMigratesBboltStore(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	old, err := boltstore.Open(dir, boltstore.WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]engine.MovieStats{}
	epochs := map[int32]int64{}
	for p := range int32(3) {
		var e int64
		for range p + 1 { // epochs 1, 2, 3
			if e, err = old.Claim(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		epochs[p] = e
		var docs []engine.MovieStats
		for id := int64(p) + 1; id <= 1500; id += 3 {
			m := syntheticMovie(id, id)
			m.Partition = p
			docs = append(docs, m)
			want[id] = m
		}
		if err := old.Apply(ctx, engine.Batch{Partition: p, Epoch: e, Docs: docs, Checkpoint: 100 + int64(p)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open of a v1 store: %v", err)
	}
	defer s.Close()
	if _, err := os.Stat(filepath.Join(dir, dbFileV1)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old %s after migration: %v; want removed", dbFileV1, err)
	}
	if got := storedMovies(t, s, 1500); !sameMovies(got, want) {
		t.Fatalf("migrated store holds %d movies; want the %d written", len(got), len(want))
	}
	for p := range int32(3) {
		if next, ok, err := s.Checkpoint(ctx, p); err != nil || !ok || next != 100+int64(p) {
			t.Errorf("checkpoint of partition %d = %d, %v, %v; want %d", p, next, ok, err, 100+p)
		}
		if e, err := s.Claim(ctx, p); err != nil || e != epochs[p]+1 {
			t.Errorf("claim of partition %d after migration = %d, %v; want %d", p, e, err, epochs[p]+1)
		}
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
	// A fenced old writer stays fenced; the new owner writes on.
	if err := s.Apply(ctx, engine.Batch{Partition: 0, Epoch: epochs[0], Checkpoint: 200}); !errors.Is(err, engine.ErrFenced) {
		t.Errorf("Apply with the pre-migration epoch = %v; want ErrFenced", err)
	}
}

// TestOpenResumesInterruptedMigration leaves the state of a migration that
// crashed after building the new store but before removing the old file,
// and one that crashed while building: both open to the old store's data.
func TestOpenResumesInterruptedMigration(t *testing.T) {
	ctx := context.Background()
	build := func(t *testing.T) string {
		dir := t.TempDir()
		old, err := boltstore.Open(dir, boltstore.WithFsync(false))
		if err != nil {
			t.Fatal(err)
		}
		e, _ := old.Claim(ctx, 0)
		if err := old.Apply(ctx, engine.Batch{Epoch: e, Docs: []engine.MovieStats{syntheticMovie(7, 3)}, Checkpoint: 4}); err != nil {
			t.Fatal(err)
		}
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("half-built new store", func(t *testing.T) {
		dir := build(t)
		if err := os.MkdirAll(filepath.Join(dir, migratingDir), 0o750); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(dir, migratingDir, "000001.log"), "torn")
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if m, err := s.Get(ctx, 7); err != nil || m.Version != 3 {
			t.Fatalf("Get(7) = %+v, %v; want version 3", m, err)
		}
		if _, err := os.Stat(filepath.Join(dir, migratingDir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", migratingDir, err)
		}
	})
	t.Run("old file not yet removed", func(t *testing.T) {
		dir := build(t)
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Put the old file back, as if the migration crashed before removing it.
		old := build(t)
		if err := os.Rename(filepath.Join(old, dbFileV1), filepath.Join(dir, dbFileV1)); err != nil {
			t.Fatal(err)
		}
		s, err = Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := os.Stat(filepath.Join(dir, dbFileV1)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("old file after reopen: %v; want removed", err)
		}
		if next, ok, err := s.Checkpoint(ctx, 0); err != nil || !ok || next != 4 {
			t.Fatalf("checkpoint = %d, %v, %v; want 4", next, ok, err)
		}
	})
}
