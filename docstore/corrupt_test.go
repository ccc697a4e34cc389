package docstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestCorruptFileIsErrCorrupt damages the largest table file of a closed
// store (4 KiB of garbage in its middle, as a bad disk or a bad copy
// would) and reopens it. Open succeeds (Pebble checks blocks as it reads
// them), the write cache's warm-up reads the damaged block without
// stopping the process (Pebble's default on corruption is to call its
// logger's Fatalf), and every read either answers the stored movie or
// fails with ErrCorrupt naming the directory: never a wrong document.
// (Once the warm-up or a read meets the damage, the store is condemned
// and every read fails.)
func TestCorruptFileIsErrCorrupt(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	fill(t, s, n, 2000)
	want := map[int64]int64{}
	for id := int64(1); id <= n; id++ {
		m, err := s.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = m.Count
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	biggest, size := testkit.DamageStore(t, dir)

	s, err = Open(dir, WithFsync(false))
	if err != nil {
		t.Fatalf("Open of a store with a damaged table file: %v; want it open (blocks are checked as they are read)", err)
	}
	defer s.Close()
	<-s.Warmed() // the warm-up read the damaged block, and the process is still here
	corrupt := 0
	for id := int64(1); id <= n; id++ {
		m, err := s.Get(context.Background(), id)
		switch {
		case errors.Is(err, ErrCorrupt):
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("Get(%d): %v; want the error to name the directory %s", id, err, dir)
			}
			corrupt++
		case err != nil:
			t.Fatalf("Get(%d): %v; want the movie or ErrCorrupt", id, err)
		case m.Count != want[id]:
			t.Fatalf("Get(%d) = count %d; want %d: a damaged store answered a wrong document", id, m.Count, want[id])
		}
	}
	if corrupt == 0 {
		t.Fatalf("no read failed: the damage at offset %d of %s was not where documents are (the test did not inject what it claims)", size/3, biggest)
	}
	ids := make([]int64, 0, n)
	for id := int64(1); id <= n; id++ {
		ids = append(ids, id)
	}
	if _, err := s.Load(context.Background(), ids); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Load of every movie: %v; want ErrCorrupt", err)
	}
	// A range query pages through the rank index and reads the documents
	// through Clover: it fails or answers every movie right, never a
	// shorter list as if the damaged ones did not exist.
	q := engine.RangeQuery{MinAvg: 0, MaxAvg: math.Inf(1), Limit: 1000}
	listed, rangeErr := 0, error(nil)
	for {
		page, err := s.Range(context.Background(), q)
		if err != nil {
			rangeErr = err
			break
		}
		for _, m := range page.Movies {
			if m.Count != want[m.MovieID] {
				t.Fatalf("Range: movie %d count %d; want %d", m.MovieID, m.Count, want[m.MovieID])
			}
		}
		listed += len(page.Movies)
		if page.Next == nil {
			break
		}
		q.After = page.Next
	}
	if rangeErr == nil && listed != n {
		t.Errorf("Range listed %d movies and no error; want all %d or an error", listed, n)
	}
	t.Logf("%d of %d movies unreadable after 4 KiB of damage in %s; a full range query: %d listed, %v", corrupt, n, filepath.Base(biggest), listed, rangeErr)
}

// TestCorruptStoreCondemnedAndRebuilt checks what follows the first
// corruption a store meets: every later call fails with ErrCorrupt (the
// movies it answered before included: nothing it holds is trusted), the
// marker survives the process, an Open without WithRebuildCorrupt refuses
// the store and leaves its files, and an Open with it wipes the store and
// opens it empty and writable, once.
func TestCorruptStoreCondemnedAndRebuilt(t *testing.T) {
	ctx := context.Background()
	const n = 20000
	dir := filledDir(t, n, 2000)
	damaged, _ := testkit.DamageStore(t, dir)

	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	<-s.Warmed()
	first := int64(0)
	for id := int64(1); id <= n && first == 0; id++ {
		if _, err := s.Get(ctx, id); errors.Is(err, ErrCorrupt) {
			first = id
		}
	}
	if first == 0 {
		t.Fatal("no Get met the damage")
	}
	select {
	case <-s.Condemned():
	default:
		t.Fatal("Condemned() not closed after a read met the damage")
	}
	if err := s.CondemnedErr(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("CondemnedErr() = %v; want ErrCorrupt", err)
	}
	for _, id := range []int64{1, n / 2, n} {
		if _, err := s.Get(ctx, id); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Get(%d) after the store met corruption: %v; want ErrCorrupt", id, err)
		}
	}
	epoch, err := s.Claim(ctx, 0)
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("Claim after the store met corruption: %v; want ErrCorrupt", err)
	}
	err = s.Apply(ctx, engine.Batch{Partition: 0, Epoch: epoch, Docs: []engine.MovieStats{syntheticMovie(1, 2)}, Checkpoint: n + 1})
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("Apply after the store met corruption: %v; want ErrCorrupt", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close of a condemned store: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, corruptMarker)); err != nil {
		t.Fatalf("marker after Close: %v; want it there for the next start", err)
	}

	if _, err := Open(dir, WithFsync(false)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Open without rebuild: %v; want ErrCorrupt naming %s", err, dir)
	}
	if _, err := os.Stat(damaged); err != nil {
		t.Fatalf("the refused store's files: %v; want them left for inspection", err)
	}

	s, err = Open(dir, WithFsync(false), WithRebuildCorrupt(true))
	if err != nil {
		t.Fatalf("Open with rebuild: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, corruptMarker)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker after the rebuild: %v; want it gone", err)
	}
	if _, ok, err := s.Checkpoint(ctx, 0); err != nil || ok {
		t.Errorf("Checkpoint(0) of the rebuilt store = ok %v, %v; want none (an empty store, restored from the changelog)", ok, err)
	}
	if _, err := s.Get(ctx, 1); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get(1) of the rebuilt store: %v; want ErrNotFound", err)
	}
	fill(t, s, 100, 100)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, WithFsync(false)) // no marker: no rebuild needed
	if err != nil {
		t.Fatalf("reopen of the rebuilt store: %v", err)
	}
	defer s.Close()
	want := syntheticMovie(100, 1)
	if m, err := s.Get(ctx, 100); err != nil || m.Count != want.Count || m.Sum != want.Sum {
		t.Errorf("Get(100) after reopening the rebuilt store = %+v, %v; want %+v", m, err, want)
	}
}

// TestCorruptMarkerWithoutStore covers a crash between the two steps of a
// rebuild (the store removed, its marker not yet): the next Open with
// rebuild opens an empty store; one without still refuses.
func TestCorruptMarkerWithoutStore(t *testing.T) {
	for _, rebuild := range []bool{false, true} {
		t.Run(fmt.Sprintf("rebuild=%v", rebuild), func(t *testing.T) {
			dir := t.TempDir()
			if err := writeCorruptMarker(dir, errors.New("injected")); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir, WithFsync(false), WithRebuildCorrupt(rebuild))
			if !rebuild {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "injected") {
					t.Fatalf("Open: %v; want ErrCorrupt with the marker's reason", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v; want an empty store", err)
			}
			defer s.Close()
			fill(t, s, 10, 10)
			select {
			case <-s.Condemned():
				t.Fatalf("a rebuilt store is condemned: %v", s.CondemnedErr())
			default:
			}
		})
	}
}

// TestCorruptManifestOnOpen damages the store's manifest, which Pebble
// reads while opening: Open fails with ErrCorrupt (not a panic, not
// ErrNotStore), or with the rebuild option opens an empty store.
func TestCorruptManifestOnOpen(t *testing.T) {
	for _, rebuild := range []bool{false, true} {
		t.Run(fmt.Sprintf("rebuild=%v", rebuild), func(t *testing.T) {
			dir := filledDir(t, 1000, 100)
			manifests, _ := filepath.Glob(filepath.Join(dir, "store", "MANIFEST-*"))
			if len(manifests) == 0 {
				t.Fatal("no manifest")
			}
			for _, m := range manifests {
				b, err := os.ReadFile(m)
				if err != nil {
					t.Fatal(err)
				}
				for i := range b {
					b[i] ^= 0x5a
				}
				if err := os.WriteFile(m, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Open(dir, WithFsync(false), WithRebuildCorrupt(rebuild))
			if !rebuild {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Open: %v; want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open with rebuild: %v; want an empty store", err)
			}
			defer s.Close()
			if _, err := s.Get(context.Background(), 1); !errors.Is(err, engine.ErrNotFound) {
				t.Errorf("Get(1) of the rebuilt store: %v; want ErrNotFound", err)
			}
		})
	}
}

// filledDir returns the directory of a closed store holding movies 1..n,
// written in batches of batch.
func filledDir(t *testing.T, n, batch int) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, n, batch)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}
