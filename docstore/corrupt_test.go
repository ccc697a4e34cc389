package docstore

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestCorruptFileIsErrCorrupt damages the largest table file of a closed
// store (4 KiB of garbage in its middle, as a bad disk or a bad copy
// would) and reopens it. Open succeeds (Pebble checks blocks as it reads
// them), the write cache's warm-up reads the damaged block without
// stopping the process (Pebble's default on corruption is to call its
// logger's Fatalf), and every read either answers the stored movie or
// fails with ErrCorrupt naming the directory: never a wrong document.
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
	biggest, size := "", int64(0)
	paths, _ := filepath.Glob(filepath.Join(dir, "store", "*.sst"))
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.Size() > size {
			biggest, size = p, st.Size()
		}
	}
	if biggest == "" {
		t.Fatalf("no table file under %s", dir)
	}
	garbage := []byte(strings.Repeat("\xab", 4096))
	if err := os.WriteFile(biggest+".tmp", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(biggest, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(garbage, size/3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.Remove(biggest + ".tmp")

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
