package docstore

import (
	"context"
	"errors"
	"fmt"
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
// them), the table's write-cache warm-up reads the damaged block without
// stopping the process (Pebble's default on corruption is to call its
// logger's Fatalf), and every read (Get, then a query paging through an
// index) either answers the stored document or fails with ErrCorrupt
// naming the directory: never a wrong document, never a shorter list.
// (The damage lands in documents or in index entries; once the warm-up or
// a read meets it, the store is condemned and every read fails.)
func TestCorruptFileIsErrCorrupt(t *testing.T) {
	ctx := context.Background()
	const n = 20000
	dir := filledDir(t, n, 2000)
	biggest, size := testkit.DamageStore(t, dir)

	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatalf("Open of a store with a damaged table file: %v; want it open (blocks are checked as they are read)", err)
	}
	defer s.Close()
	tb := mustTable(t, s, ordersSpec)
	<-tb.cache.warmed // the warm-up read the damaged block, and the process is still here
	corrupt := 0
	keys := make([][]byte, 0, n)
	for i := range n {
		want := filledDoc(i)
		keys = append(keys, want.Key)
		got, err := tb.Get(ctx, want.Key)
		switch {
		case errors.Is(err, ErrCorrupt):
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("Get(%q): %v; want the error to name the directory %s", want.Key, err, dir)
			}
			corrupt++
		case err != nil:
			t.Fatalf("Get(%q): %v; want the document or ErrCorrupt", want.Key, err)
		case !sameTableDoc(got, want):
			t.Fatalf("Get(%q) = %+v; want %+v: a damaged store answered a wrong document", want.Key, got, want)
		}
	}
	// A query pages through the index entries and reads the documents: it
	// fails or answers every document right, never a shorter list as if
	// the damaged ones did not exist.
	q := engine.IndexQuery{Index: "total", Limit: 1000}
	listed, queryErr := 0, error(nil)
	for {
		page, err := tb.Query(ctx, q)
		if err != nil {
			queryErr = err
			break
		}
		for _, d := range page.Docs {
			var i int
			if _, err := fmt.Sscanf(string(d.Key), "cust-%d", &i); err != nil || !sameTableDoc(d, filledDoc(i)) {
				t.Fatalf("Query: %+v; want %+v", d, filledDoc(i))
			}
		}
		listed += len(page.Docs)
		if page.Next == nil {
			break
		}
		q.After = page.Next
	}
	switch {
	case queryErr == nil && listed != n:
		t.Errorf("Query listed %d documents and no error; want all %d or an error", listed, n)
	case queryErr != nil && !errors.Is(queryErr, ErrCorrupt):
		t.Fatalf("Query: %v; want the documents or ErrCorrupt", queryErr)
	case queryErr == nil && corrupt == 0:
		t.Fatalf("no read failed: the damage at offset %d of %s was not where documents or index entries are (the test did not inject what it claims)", size/3, biggest)
	}
	if _, err := tb.Load(ctx, keys); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Load of every document: %v; want ErrCorrupt", err)
	}
	t.Logf("%d of %d documents unreadable after 4 KiB of damage in %s; a full query: %d listed, %v", corrupt, n, filepath.Base(biggest), listed, queryErr)
}

// TestCorruptStoreCondemnedAndRebuilt checks what follows the first
// corruption a store meets: every later call fails with ErrCorrupt (the
// documents it answered before included: nothing it holds is trusted), the
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
	tb := mustTable(t, s, ordersSpec)
	<-tb.cache.warmed
	met := false
	for i := 0; i < n && !met; i++ {
		_, err := tb.Get(ctx, filledDoc(i).Key)
		met = errors.Is(err, ErrCorrupt)
	}
	for q := (engine.IndexQuery{Index: "total", Limit: 1000}); !met; {
		page, err := tb.Query(ctx, q)
		met = errors.Is(err, ErrCorrupt)
		if err != nil || page.Next == nil {
			break
		}
		q.After = page.Next
	}
	if !met {
		t.Fatal("no Get nor query met the damage")
	}
	select {
	case <-s.Condemned():
	default:
		t.Fatal("Condemned() not closed after a read met the damage")
	}
	if err := s.CondemnedErr(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("CondemnedErr() = %v; want ErrCorrupt", err)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if _, err := tb.Get(ctx, filledDoc(i).Key); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Get(%d) after the store met corruption: %v; want ErrCorrupt", i, err)
		}
	}
	epoch, err := tb.Claim(ctx, 0)
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("Claim after the store met corruption: %v; want ErrCorrupt", err)
	}
	err = tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: []engine.Doc{filledDoc(1)}, Checkpoint: n + 1})
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("Apply after the store met corruption: %v; want ErrCorrupt", err)
	}
	if _, err := s.OpenTable(ctx, ordersSpec); !errors.Is(err, ErrCorrupt) {
		t.Errorf("OpenTable after the store met corruption: %v; want ErrCorrupt", err)
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
	tb = mustTable(t, s, ordersSpec)
	if _, ok, err := tb.Checkpoint(ctx, 0); err != nil || ok {
		t.Errorf("Checkpoint(0) of the rebuilt store = ok %v, %v; want none (an empty store, restored from the changelog)", ok, err)
	}
	if _, err := tb.Get(ctx, filledDoc(1).Key); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get of the rebuilt store: %v; want ErrNotFound", err)
	}
	fillTable(t, tb, 100, 100)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, WithFsync(false)) // no marker: no rebuild needed
	if err != nil {
		t.Fatalf("reopen of the rebuilt store: %v", err)
	}
	defer s.Close()
	tb = mustTable(t, s, ordersSpec)
	want := orderDoc(99, 0, 1)
	if got, err := tb.Get(ctx, want.Key); err != nil || !sameTableDoc(got, want) {
		t.Errorf("Get(%q) after reopening the rebuilt store = %+v, %v; want %+v", want.Key, got, err, want)
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
			fillTable(t, mustTable(t, s, ordersSpec), 10, 10)
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
			tb := mustTable(t, s, ordersSpec)
			if _, err := tb.Get(context.Background(), filledDoc(1).Key); !errors.Is(err, engine.ErrNotFound) {
				t.Errorf("Get of the rebuilt store: %v; want ErrNotFound", err)
			}
		})
	}
}

// filledDoc is order i at version 1 with a value of about 600 bytes, so
// that documents fill most of a store's files (damage lands there).
func filledDoc(i int) engine.Doc {
	d := orderDoc(i, 0, 1)
	d.Value = fmt.Appendf(d.Value, "%0550d", i)
	return d
}

// filledDir returns the directory of a closed store whose table orders
// holds filledDoc 0..n-1 in partition 0, written in batches of batch.
func filledDir(t *testing.T, n, batch int) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	tb := mustTable(t, s, ordersSpec)
	ctx := context.Background()
	epoch, err := tb.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for start := 0; start < n; start += batch {
		var docs []engine.Doc
		for i := start; i < min(start+batch, n); i++ {
			docs = append(docs, filledDoc(i))
		}
		if err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: int64(start + len(docs))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}
