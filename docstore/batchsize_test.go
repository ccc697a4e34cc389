package docstore

import (
	"log/slog"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestMovieBatchBytes checks the size Apply gives its batch up front
// against the batch the writer builds: updates of movies with three
// sources (a rank entry deleted and one added, the document, the members
// entry) must fit in it, with less than half of it left unused.
func TestMovieBatchBytes(t *testing.T) {
	p, err := openPebble(t.TempDir(), defaults(), slog.New(slog.DiscardHandler), false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close(false)
	const n = 1000
	docs := make([]engine.MovieStats, n)
	for i := range docs {
		id := int64(1_000_000 + i*7919)
		docs[i] = engine.MovieStats{MovieID: id, Partition: 1, Count: 1234, Sum: 6170.5, Version: 123_456_789 + id,
			Sources: map[int32]int64{0: 12_345_678, 1: 23_456_789, 2: 34_567_890}}
	}
	b := p.writeBatch(n * movieBatchBytes)
	defer b.release()
	w := newDocWriter(b, nil)
	for _, m := range docs {
		old := prior{sum: 9, count: 2, part: 1} // average 4.5
		if err := w.put(m, old, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.writeIndex(); err != nil { // the rank entries and members keys put gathered
		t.Fatal(err)
	}
	got := b.(*pebbleBatch).b.Len()
	t.Logf("%d bytes per updated movie; Apply reserves %d", got/n, movieBatchBytes)
	if got > n*movieBatchBytes || got < n*movieBatchBytes/2 {
		t.Fatalf("batch of %d updated movies is %d bytes (%d per movie); want between %d and %d per movie",
			n, got, got/n, movieBatchBytes/2, movieBatchBytes)
	}
}
