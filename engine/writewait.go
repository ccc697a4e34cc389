package engine

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// writeWaits tracks the Kafka writes in flight (a flush's transaction, a
// rekey stage's send or commit), so that /readyz can say when Kafka has
// stopped accepting them: the producers retry for up to twice the
// transaction timeout, which would otherwise leave /readyz at 200.
type writeWaits struct {
	mu         sync.Mutex
	next       uint64
	since      map[uint64]writeWait
	stuckAfter time.Duration // how long a write may wait before Ready reports it (0: never)
}

// writeWait is one write in flight.
type writeWait struct {
	what  string
	since time.Time
}

// begin records a write named what and returns the function that ends it.
func (w *writeWaits) begin(what string) func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since == nil {
		w.since = map[uint64]writeWait{}
	}
	w.next++
	id := w.next
	w.since[id] = writeWait{what: what, since: time.Now()}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.since, id)
	}
}

// stuck returns an error naming the oldest write in flight when it has
// waited longer than stuckAfter, else nil. cause, when not nil, is the
// last error that restarted the group session, added as a hint.
func (w *writeWaits) stuck(cause error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stuckAfter <= 0 || len(w.since) == 0 {
		return nil
	}
	oldest := slices.MinFunc(slices.Collect(maps.Values(w.since)), func(a, b writeWait) int { return a.since.Compare(b.since) })
	waited := time.Since(oldest.since)
	if waited < w.stuckAfter {
		return nil
	}
	err := fmt.Errorf("kafka has not accepted the writes of %s for %v: brokers down or unreachable, or fewer in-sync replicas than min.insync.replicas",
		oldest.what, waited.Round(time.Second))
	if cause != nil {
		err = fmt.Errorf("%w; last error: %v", err, cause)
	}
	return err
}
