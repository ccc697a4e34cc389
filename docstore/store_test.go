package docstore

import (
	"context"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/ostafen/clover/v2"
)

// openTemp opens a store in a fresh temporary directory.
func openTemp(t testing.TB, opts ...Option) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// loadConcurrently runs load over and over in two goroutines, each with
// its own random source (seeded with seed), until stop is called; stop
// waits for both and returns the first error of load.
func loadConcurrently(seed uint64, load func(r *rand.Rand) error) (stop func() error) {
	done := make(chan struct{})
	errs := make(chan error, 2)
	for g := range 2 {
		go func() {
			r := rand.New(rand.NewPCG(uint64(g), seed))
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if err := load(r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	return func() error {
		close(done)
		return errors.Join(<-errs, <-errs)
	}
}

// reset zeroes the read counters.
func (c *readCounts) reset() {
	c.docGets.Store(0)
	c.docScans.Store(0)
	c.indexSteps.Store(0)
}

// view runs fn on one snapshot of s, with a Clover handle reading it (its
// reads counted in s.counts).
func (s *Store) view(ctx context.Context, fn func(r kvReader, db *clover.DB) error) error {
	return s.tableRead(ctx, func(r kvReader) error {
		db, err := clover.OpenWithStore(&cloverStore{r: r, counts: s.counts})
		if err != nil {
			return err
		}
		return fn(r, db)
	})
}

// withoutBulkLoad turns the bulk-load path off (every replay batch reads
// the store): the reference for the equivalence test and benchmarks.
func withoutBulkLoad() Option { return func(o *options) { o.noBulk = true } }

// withIngestChunk sets how many documents a bulk load buffers before it
// hands them to a background ingestion (tests use small chunks).
func withIngestChunk(n int) Option { return func(o *options) { o.ingestChunk = n } }

// docsRead returns how many documents were read, by key or by scan.
func (c *readCounts) docsRead() int64 { return c.docGets.Load() + c.docScans.Load() }

// docID returns the Clover _id of key.
func docID(key []byte) string { return hex.EncodeToString(key) }

// of returns the cache of table name, creating it.
func (c *tableCaches) of(name string) *tableCache {
	tc, _ := c.open(name, c.bulkMax)
	return tc
}
