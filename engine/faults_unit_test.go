package engine_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestUnitTransientFailures injects one failure between two batches of
// ratings, at each step of the protocol where Kafka, the registry or the
// store can fail, and checks that the engine recovers (restarting the
// session where the failure is fatal to it) with exact final counts. Kafka
// failures are error answers of the cluster to the step's request; a
// transaction's first request is its AddPartitionsToTxn (BeginTxn itself
// sends nothing). An error the client retries by itself is injected as
// often as it retries, so that the engine sees it.
func TestUnitTransientFailures(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	boom := errors.New("injected")
	// rigFn injects a failure; a Kafka fault returns its handle.
	type rigFn func(r *rig) *kfake.FaultHandle
	fail := func(f kfake.Fault) rigFn {
		return func(r *rig) *kfake.FaultHandle { return r.c.fail(f) }
	}
	store := func(fn func(r *rig)) rigFn {
		return func(r *rig) *kfake.FaultHandle { fn(r); return nil }
	}
	commits := func(req kmsg.Request) bool { return req.(*kmsg.EndTxnRequest).Commit }
	topics := engine.Config{ApplicationID: "unit"}.Topics()
	task, rekey := topics.TransactionalID(0), topics.RekeyTransactionalID(0)
	// The shared producer retries NOT_ENOUGH_REPLICAS fifty times (engine
	// saramaConfig: Producer.Retry.Max, 200 ms apart, to wait out a leader
	// failover); the fifty-first answer reaches the engine.
	const sendAttempts = 51
	tests := []struct {
		name        string
		g           engine.Guarantee
		inject      rigFn
		wantRestart bool
		failsCommit bool // see failedTxnTimeout
	}{
		{"task add-partitions fails", engine.ExactlyOnce, fail(kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn}, TxnID: task}), true, false},
		{"changelog send fails", engine.ExactlyOnce, fail(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topics.Changelog, When: producedBy(task)}), true, false},
		{"task offsets refused", engine.ExactlyOnce, fail(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, TxnID: task, Err: kerr.IllegalGeneration}), true, false},
		{"rekey send fails", engine.ExactlyOnce, fail(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, When: producedBy(rekey)}), true, false},
		{"rekey commit fenced", engine.ExactlyOnce, fail(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: rekey, When: commits, Err: kerr.ProducerFenced}), true, true},
		{"rekey commit fails", engine.ExactlyOnce, fail(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: rekey, When: commits}), true, true},
		{"rekey add-partitions fails", engine.ExactlyOnce, fail(kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn}, TxnID: rekey}), true, false},
		{"store write fenced", engine.ExactlyOnce, store(func(r *rig) { r.store.failApply = append(r.store.failApply, engine.ErrFenced) }), true, false},
		{"store write fails", engine.ExactlyOnce, store(func(r *rig) { r.store.failApply = append(r.store.failApply, boom) }), true, false},
		{"store unavailable", engine.ExactlyOnce, store(func(r *rig) {
			r.store.failLoad = append(r.store.failLoad, fmt.Errorf("down: %w", engine.ErrUnavailable))
			r.store.failApply = append(r.store.failApply, fmt.Errorf("down: %w", engine.ErrUnavailable))
		}), false, false},
		{"registry unavailable", engine.ExactlyOnce, store(func(r *rig) { r.serde.failNext = 2 }), false, false},
		{"repartition send fails", engine.AtLeastOnce, fail(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topics.Repartition, Err: kerr.NotEnoughReplicas, Count: sendAttempts}), true, false},
		{"changelog send fails", engine.AtLeastOnce, fail(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topics.Changelog, Err: kerr.NotEnoughReplicas, Count: sendAttempts}), true, false},
		{"offset commit refused", engine.AtLeastOnce, fail(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: "unit", Err: kerr.RebalanceInProgress}), false, false},
		{"store write fenced", engine.AtLeastOnce, store(func(r *rig) { r.store.failApply = append(r.store.failApply, engine.ErrFenced) }), true, false},
	}
	first := []rating{{1, 5}, {2, 7}}
	second := []rating{{1, 9}, {2, 1}, {3, 4}}
	for _, tt := range tests {
		t.Run(string(tt.g)+"/"+tt.name, func(t *testing.T) {
			t.Parallel() // each on its own cluster
			cfg := unitConfig(nil, tt.g)
			if tt.failsCommit {
				cfg.TransactionTimeout = failedTxnTimeout
			}
			r := newRig(t, nil, cfg, nil).start(t)
			r.rate(t, 0, first...)
			eventually(t, "first batch stored", r.storeHas(totals(first)))
			eventually(t, "running", r.ready)
			r.store.mu.Lock()
			r.serde.mu.Lock()
			h := tt.inject(r)
			r.serde.mu.Unlock()
			r.store.mu.Unlock()
			r.rate(t, 0, second...)
			// A send fault takes sendAttempts answers, 200 ms apart.
			testkit.Eventually(t, 3*unitTimeout, "both batches stored", r.storeHas(totals(first, second)))
			if got := r.e.Stats().GroupRestarts > 0; got != tt.wantRestart {
				t.Errorf("GroupRestarts > 0: got %v (%d), want %v", got, r.e.Stats().GroupRestarts, tt.wantRestart)
			}
			if h != nil && h.Hits() == 0 {
				t.Errorf("the injected Kafka fault answered no request")
			}
		})
	}
}

// failedTxnTimeout is the transaction timeout of tests that fail a commit.
// A commit answered with an error leaves the transaction open on the
// broker, holding its offsets, until the broker aborts it at the
// transaction timeout (or a new producer with the same transactional id
// does); the rejoined session's offset fetch of those partitions waits for
// that. A short timeout keeps the wait short.
const failedTxnTimeout = 2 * time.Second

// TestUnitJoinFailureRetries fails the consumer group join once (with an
// error the client does not retry by itself): Run logs it, counts a
// restart, and joins again.
func TestUnitJoinFailureRetries(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	c := newCluster(t)
	c.fail(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}})
	r := newRig(t, c, unitConfig(c, engine.ExactlyOnce), nil).start(t)
	r.rate(t, 0, rating{1, 3})
	eventually(t, "stored after the retried join", r.storeHas(totals([]rating{{1, 3}})))
	if got := r.e.Stats().GroupRestarts; got != 1 {
		t.Errorf("GroupRestarts: got %d, want 1", got)
	}
}

// TestUnitInitProducerFailure fails the task producer's initialisation
// once (with an error the client does not retry by itself): the restore
// fails, the session restarts and the partition is restored on the next
// try.
func TestUnitInitProducerFailure(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	c := newCluster(t)
	cfg := unitConfig(c, engine.ExactlyOnce)
	c.fail(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, TxnID: cfg.Topics().TransactionalID(0)})
	r := newRig(t, c, cfg, nil).start(t)
	r.rate(t, 0, rating{1, 3})
	eventually(t, "stored after the failed restore", r.storeHas(totals([]rating{{1, 3}})))
	if got := r.e.Stats().GroupRestarts; got < 1 {
		t.Errorf("GroupRestarts: got %d, want >= 1", got)
	}
}

// TestUnitCacheBoundFlushesEarly sets a one-document cache and a commit
// interval too long to matter: the cache bound alone triggers the
// flushes, and the counts are exact.
func TestUnitCacheBoundFlushesEarly(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	for _, g := range []engine.Guarantee{engine.ExactlyOnce, engine.AtLeastOnce} {
		t.Run(string(g), func(t *testing.T) {
			cfg := unitConfig(nil, g)
			cfg.CommitInterval = time.Hour
			cfg.IdleFlush = 0
			cfg.CacheMaxDocs = 1
			r := newRig(t, nil, cfg, nil).start(t)
			ratings := []rating{{1, 1}, {2, 2}, {3, 3}, {1, 4}, {4, 5}}
			for _, x := range ratings {
				r.rate(t, 0, x)
			}
			eventually(t, "stored by cache-full flushes", r.storeHas(totals(ratings)))
		})
	}
}
