package docstore

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/moviedoc"
	"github.com/ostafen/clover/v2"
	"github.com/ostafen/clover/v2/query"
)

// fill writes n movies (ids 1..n, averages spread over 0..10 with ties) in
// batches of batch documents.
func fill(tb testing.TB, s *Store, n, batch int) {
	tb.Helper()
	ctx := context.Background()
	epoch, err := s.Claim(ctx, 0)
	if err != nil {
		tb.Fatal(err)
	}
	docs := make([]engine.MovieStats, 0, batch)
	for id := 1; id <= n; id++ {
		docs = append(docs, syntheticMovie(int64(id), 1))
		if len(docs) == batch || id == n {
			if err := s.Apply(ctx, engine.Batch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: int64(id)}); err != nil {
				tb.Fatalf("fill batch ending at %d: %v", id, err)
			}
			docs = docs[:0]
		}
	}
}

// syntheticMovie returns a deterministic movie: count 1..20 and an average
// in [0, 10] on a 0.05 grid (many ties), different for each version.
func syntheticMovie(id, version int64) engine.MovieStats {
	h := uint64(id)*0x9E3779B97F4A7C15 + uint64(version)*0xBF58476D1CE4E5B9
	h ^= h >> 31
	count := int64(h%20) + 1
	avg := float64((h>>8)%201) / 20
	return engine.MovieStats{MovieID: id, Partition: int32(id % 4), Count: count, Sum: avg * float64(count),
		Version: version, Sources: map[int32]int64{int32(id % 3): version}}
}

// scanTop answers a range query without the rank index: a predicate and a
// sort on the unindexed avg field, which Clover can only serve by reading
// the whole collection.
func scanTop(s *Store, minAvg float64, limit int) ([]engine.MovieStats, error) {
	var out []engine.MovieStats
	q := query.NewQuery(collection).Where(query.Field(moviedoc.FieldAvg).GtEq(minAvg)).
		Sort(query.SortOption{Field: moviedoc.FieldAvg, Direction: -1}, query.SortOption{Field: moviedoc.FieldMovie, Direction: 1}).
		Limit(limit)
	err := s.view(context.Background(), func(_ kvReader, db *clover.DB) error {
		docs, err := db.FindAll(q)
		for _, doc := range docs {
			m, err := moviedoc.FromDocument(doc)
			if err != nil {
				return err
			}
			out = append(out, m)
		}
		return err
	})
	return out, err
}

func (c *readCounts) reset() {
	c.docGets.Store(0)
	c.docScans.Store(0)
	c.indexSteps.Store(0)
}

// TestRangeIsServedByTheIndex proves the pushdown on a 100k-document store
// (20k under the race detector): the minAvg query reads O(limit)
// documents, the same question on an unindexed field reads all of them.
func TestRangeIsServedByTheIndex(t *testing.T) {
	const limit = 100
	n := 100_000
	if raceEnabled {
		n = 20_000
	}
	s := openTemp(t, WithFsync(false))
	defer s.Close()
	start := time.Now()
	fill(t, s, n, 10_000)
	t.Logf("filled %d documents in %v", n, time.Since(start))
	ctx := context.Background()

	s.counts.reset()
	page, err := s.Range(ctx, engine.RangeQuery{MinAvg: 8, MaxAvg: math.Inf(1), Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	indexed := s.counts.docsRead()
	t.Logf("range minAvg=8 limit=%d: %d documents read, %d index entries", limit, indexed, s.counts.indexSteps.Load())
	if len(page.Movies) != limit || page.Next == nil {
		t.Fatalf("range returned %d movies, next %v; want a full page of %d with a cursor", len(page.Movies), page.Next, limit)
	}
	if indexed > limit+2 {
		t.Fatalf("range read %d documents; want at most limit+2 = %d (index pushdown)", indexed, limit+2)
	}
	if steps := s.counts.indexSteps.Load(); steps > limit+3 {
		t.Fatalf("range visited %d index entries; want at most %d", steps, limit+3)
	}

	// A page deep in the order costs the same.
	s.counts.reset()
	deep, err := s.Range(ctx, engine.RangeQuery{MinAvg: 0, MaxAvg: math.Inf(1), Limit: limit,
		After: &engine.Cursor{Avg: 5, MovieID: int64(n / 2)}})
	if err != nil || len(deep.Movies) != limit {
		t.Fatalf("deep page = %d movies, %v", len(deep.Movies), err)
	}
	if got := s.counts.docsRead(); got > limit+2 {
		t.Fatalf("deep page read %d documents; want at most %d", got, limit+2)
	}

	// The same answer through an unindexed field reads every document.
	s.counts.reset()
	scanned, err := scanTop(s, 8, limit)
	if err != nil {
		t.Fatal(err)
	}
	full := s.counts.docsRead()
	t.Logf("same query on the unindexed avg field: %d documents read", full)
	if full < int64(n) {
		t.Fatalf("unindexed query read %d documents; want all %d (the comparison is meaningless otherwise)", full, n)
	}
	if len(scanned) != len(page.Movies) {
		t.Fatalf("scan answer has %d movies; index answer %d", len(scanned), len(page.Movies))
	}
	for i := range scanned {
		if scanned[i].MovieID != page.Movies[i].MovieID {
			t.Fatalf("position %d: index answer movie %d, scan answer movie %d", i, page.Movies[i].MovieID, scanned[i].MovieID)
		}
	}

	// Key lookups read exactly one document.
	s.counts.reset()
	if _, err := s.Get(ctx, int64(n/3)); err != nil {
		t.Fatal(err)
	}
	if got := s.counts.docsRead(); got != 1 {
		t.Fatalf("Get read %d documents; want 1", got)
	}
}
