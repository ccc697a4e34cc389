package engine_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/kafkatest"
)

// TestUnitTransientFailures injects one failure between two batches of
// ratings, at each step of the protocol where Kafka, the registry or the
// store can fail, and checks that the engine recovers (restarting the
// session where the failure is fatal to it) with exact final counts.
func TestUnitTransientFailures(t *testing.T) {
	boom := errors.New("injected")
	type rigFn func(r *rig)
	fail := func(op kafkatest.Op, err error) rigFn {
		return func(r *rig) { r.c.FailNext(op, err) }
	}
	task := engine.Config{ApplicationID: "unit"}.Topics().TransactionalID(0)
	rekey := engine.Config{ApplicationID: "unit"}.Topics().RekeyTransactionalID(0)
	changelog := engine.Config{ApplicationID: "unit"}.Topics().Changelog
	repartition := engine.Config{ApplicationID: "unit"}.Topics().Repartition
	tests := []struct {
		name        string
		g           engine.Guarantee
		inject      rigFn
		wantRestart bool
	}{
		{"task begin fails", engine.ExactlyOnce, fail(kafkatest.Op{Kind: kafkatest.OpBegin, TxnID: task}, boom), true},
		{"changelog send fails", engine.ExactlyOnce, fail(kafkatest.Op{Kind: kafkatest.OpSend, TxnID: task, Topic: changelog}, boom), true},
		{"task offsets refused", engine.ExactlyOnce, fail(kafkatest.Op{Kind: kafkatest.OpAddOffsets, TxnID: task}, sarama.ErrIllegalGeneration), true},
		{"rekey send fails", engine.ExactlyOnce, fail(kafkatest.Op{Kind: kafkatest.OpSend, TxnID: rekey}, boom), true},
		{"rekey commit fenced", engine.ExactlyOnce, fail(kafkatest.Op{Kind: kafkatest.OpCommit, TxnID: rekey}, sarama.ErrProducerFenced), true},
		{"rekey commit fails", engine.ExactlyOnce, fail(kafkatest.Op{Kind: kafkatest.OpCommit, TxnID: rekey}, boom), true},
		{"rekey begin fails", engine.ExactlyOnce, fail(kafkatest.Op{Kind: kafkatest.OpBegin, TxnID: rekey}, boom), true},
		{"store write fenced", engine.ExactlyOnce, func(r *rig) { r.store.failApply = append(r.store.failApply, engine.ErrFenced) }, true},
		{"store write fails", engine.ExactlyOnce, func(r *rig) { r.store.failApply = append(r.store.failApply, boom) }, true},
		{"store unavailable", engine.ExactlyOnce, func(r *rig) {
			r.store.failLoad = append(r.store.failLoad, fmt.Errorf("down: %w", engine.ErrUnavailable))
			r.store.failApply = append(r.store.failApply, fmt.Errorf("down: %w", engine.ErrUnavailable))
		}, false},
		{"registry unavailable", engine.ExactlyOnce, func(r *rig) { r.serde.failNext = 2 }, false},
		{"repartition send fails", engine.AtLeastOnce, fail(kafkatest.Op{Kind: kafkatest.OpSend, Topic: repartition}, sarama.ErrNotEnoughReplicas), true},
		{"changelog send fails", engine.AtLeastOnce, fail(kafkatest.Op{Kind: kafkatest.OpSend, Topic: changelog}, sarama.ErrNotEnoughReplicas), true},
		{"offset commit refused", engine.AtLeastOnce, fail(kafkatest.Op{Kind: kafkatest.OpOffsetCommit}, sarama.ErrRebalanceInProgress), false},
		{"store write fenced", engine.AtLeastOnce, func(r *rig) { r.store.failApply = append(r.store.failApply, engine.ErrFenced) }, true},
	}
	first := []rating{{1, 5}, {2, 7}}
	second := []rating{{1, 9}, {2, 1}, {3, 4}}
	for _, tt := range tests {
		t.Run(string(tt.g)+"/"+tt.name, func(t *testing.T) {
			r := newRig(t, nil, unitConfig(nil, tt.g), nil).start(t)
			r.rate(t, 0, first...)
			eventually(t, "first batch stored", r.storeHas(totals(first)))
			eventually(t, "running", r.ready)
			r.store.mu.Lock()
			r.serde.mu.Lock()
			tt.inject(r)
			r.serde.mu.Unlock()
			r.store.mu.Unlock()
			r.rate(t, 0, second...)
			eventually(t, "both batches stored", r.storeHas(totals(first, second)))
			if got := r.e.Stats().GroupRestarts > 0; got != tt.wantRestart {
				t.Errorf("GroupRestarts > 0: got %v (%d), want %v", got, r.e.Stats().GroupRestarts, tt.wantRestart)
			}
		})
	}
}

// TestUnitJoinFailureRetries fails the consumer group join once: Run logs
// it, counts a restart, and joins again.
func TestUnitJoinFailureRetries(t *testing.T) {
	c := kafkatest.New()
	c.FailNext(kafkatest.Op{Kind: kafkatest.OpJoin}, sarama.ErrConsumerCoordinatorNotAvailable)
	r := newRig(t, c, unitConfig(c, engine.ExactlyOnce), nil).start(t)
	r.rate(t, 0, rating{1, 3})
	eventually(t, "stored after the retried join", r.storeHas(totals([]rating{{1, 3}})))
	if got := r.e.Stats().GroupRestarts; got != 1 {
		t.Errorf("GroupRestarts: got %d, want 1", got)
	}
}

// TestUnitInitProducerFailure fails the task producer's initialisation
// once: the restore fails, the session restarts and the partition is
// restored on the next try.
func TestUnitInitProducerFailure(t *testing.T) {
	c := kafkatest.New()
	cfg := unitConfig(c, engine.ExactlyOnce)
	c.FailNext(kafkatest.Op{Kind: kafkatest.OpInitProducer, TxnID: cfg.Topics().TransactionalID(0)}, sarama.ErrConcurrentTransactions)
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
