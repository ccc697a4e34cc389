package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// testConcurrentReaders runs readers in goroutines while the test goroutine
// applies batches that always update movies 1 and 2 together to the same
// count. A reader that sees different counts in one answer saw a partly
// applied batch; a reader that sees a count go down saw time run backwards.
func testConcurrentReaders(t *testing.T, open Opener) {
	s := fresh(t, open)
	const batches = 150
	pair := func(k int64) []engine.MovieStats {
		// Average stays 5 so both movies stay tied and adjacent in range order.
		return []engine.MovieStats{doc(1, 0, k, 5*float64(k), k), doc(2, 0, k, 5*float64(k), k)}
	}
	mustApply(t, s, 0, 1, append(pair(1), doc(3, 0, 1, 9, 1))...)
	epoch := claim(t, s, 0)

	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
		errs   = make(chan error, 16)
		reads  [3]atomic.Int64
	)
	report := func(err error) {
		failed.Add(1)
		select {
		case errs <- err:
		default:
		}
	}
	readers := []func() error{
		func() error { // Load sees both movies of one batch
			got, err := s.Load(c, []int64{1, 2})
			if err != nil {
				return fmt.Errorf("load: %w", err)
			}
			if len(got) != 2 || got[1].Count != got[2].Count {
				return fmt.Errorf("load saw a partial batch: movie 1 %s, movie 2 %s", show(got[1]), show(got[2]))
			}
			return nil
		},
		func() error { // Range sees both movies of one batch
			page, err := s.Range(c, engine.RangeQuery{MinAvg: 5, MaxAvg: 5, Limit: 10})
			if err != nil {
				return fmt.Errorf("range: %w", err)
			}
			if len(page.Movies) != 2 || page.Movies[0].Count != page.Movies[1].Count {
				return fmt.Errorf("range saw a partial batch: %v", page.Movies)
			}
			return nil
		},
	}
	for i, read := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.Err() == nil {
				if err := read(); err != nil && c.Err() == nil {
					report(err)
					return
				}
				reads[i].Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() { // Get never goes back in time
		defer wg.Done()
		var last int64
		for c.Err() == nil {
			m, err := s.Get(c, 1)
			if err != nil {
				if c.Err() == nil {
					report(fmt.Errorf("get: %w", err))
				}
				return
			}
			if m.Count < last {
				report(fmt.Errorf("get(1) count went from %d back to %d", last, m.Count))
				return
			}
			last = m.Count
			reads[2].Add(1)
		}
	}()

	for k := int64(2); k <= batches && failed.Load() == 0; k++ {
		b := engine.Batch{Partition: 0, Epoch: epoch, Docs: pair(k), Checkpoint: k}
		if err := s.Apply(c, b); err != nil {
			cancel()
			wg.Wait()
			t.Fatalf("Apply batch %d: %v", k, err)
		}
	}
	// Let every reader finish at least one read against the final state.
	deadline := time.Now().Add(10 * time.Second)
	for i := range reads {
		for start := reads[i].Load(); reads[i].Load() == start && failed.Load() == 0; {
			if time.Now().After(deadline) {
				report(fmt.Errorf("reader %d made no progress for 10s after the last batch", i))
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	for i := range reads {
		if reads[i].Load() == 0 {
			t.Errorf("reader %d never completed a read", i)
		}
	}
	wantDoc(t, s, pair(batches)[0])
	wantDoc(t, s, pair(batches)[1])
	wantCheckpoint(t, s, 0, batches, true)
}
