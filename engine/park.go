package engine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// Keeping a partition across a rebalance. sarama's eager protocol ends
// every claim at each rebalance, those of partitions that stay here too,
// and a restore (restore.go) then costs a producer initialisation, a
// store claim and changelog reads: up to a second per rebalance on a
// loaded broker, while the partition stands still.
//
// A task whose session ended cleanly (its final flush committed, nothing
// in flight) parks what its restore built: the transactional producer,
// the store claim and the checkpoint. The next session's task of the
// partition takes it back when that session's generation directly
// follows the parked one (then nobody else ran the partition in between:
// every generation has one owner per partition, see startSession) and
// the store still holds the parked checkpoint; the partition then runs at
// once. Anything else closes the parked producer and restores as usual.
// The producer's epoch and the claim stay those of the last owner, this
// task, so fencing is unchanged: an owner of a later generation fences
// them as it would have fenced a new producer and claim of ours.

// The exactly-once rekey stage parks its input partition's producer the
// same way (parkedRekey), and takes it back on the same terms.

// parkedTask is what a task (or a rekey stage: producer and retry only)
// kept for the next session.
type parkedTask struct {
	producer   sarama.SyncProducer // nil under at-least-once
	retry      *txnRetry
	epoch      int64
	checkpoint int64
	verified   time.Time
	gen        int32 // the generation of the session that parked it
}

// close closes the parked producer, in the background unless wait is
// set: an idle producer has no transaction open, and a session's start
// must not wait on it.
func (pt *parkedTask) close(wait bool) {
	if pr := pt.producer; pr != nil {
		pt.producer = nil
		if wait {
			_ = pr.Close()
		} else {
			go func() { _ = pr.Close() }()
		}
	}
}

// parking holds the parked tasks of this instance. Safe for concurrent
// use.
type parking struct {
	mu sync.Mutex
	m  map[int32]*parkedTask
}

func (k *parking) put(p int32, pt *parkedTask) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[int32]*parkedTask{}
	}
	if old := k.m[p]; old != nil {
		old.close(false)
	}
	k.m[p] = pt
}

// take removes and returns the task parked for p if a session of
// generation gen may take it back (see above), and closes it otherwise;
// nil if none.
func (k *parking) take(p, gen int32) *parkedTask {
	k.mu.Lock()
	pt := k.m[p]
	delete(k.m, p)
	k.mu.Unlock()
	if pt != nil && pt.gen+1 != gen {
		pt.close(false)
		return nil
	}
	return pt
}

// release closes every parked task that a session of generation gen
// running partitions keep cannot take back, and with keep nil (the
// engine stops) every one, waiting for each.
func (k *parking) release(keep []int32, gen int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for p, pt := range k.m {
		if keep == nil || pt.gen+1 != gen || !slices.Contains(keep, p) {
			pt.close(keep == nil)
			delete(k.m, p)
		}
	}
}

// park keeps what the task's restore built for the next session when the
// session ended cleanly (see above), and closes its producer otherwise.
func (t *task) park() {
	if t.inflight != nil {
		<-t.inflight.done // a persist still uses the producer
		t.inflight = nil
	}
	if !t.clean || t.broken != nil {
		t.closeProducer()
		return
	}
	t.e.parked.put(t.p, &parkedTask{producer: t.producer, retry: t.retry, epoch: t.epoch,
		checkpoint: t.checkpoint, verified: t.verified, gen: t.sess.GenerationID()})
	t.producer, t.retry = nil, nil
}

// resume takes back the task parked for the partition, if this session
// may (see above), and reports whether it did; the partition then needs
// no restore.
func (t *task) resume(ctx context.Context) bool {
	e := t.e
	gen := t.sess.GenerationID()
	pt := e.parked.take(t.p, gen)
	if pt == nil {
		return false
	}
	cp, ok, err := e.table.Checkpoint(ctx, t.p)
	if err != nil || !ok || cp != pt.checkpoint {
		// Dropped or changed while parked (a stale drop, a reset):
		// restore it.
		e.log.Info("partition parked across the rebalance changed in the store; restoring it", "partition", t.p,
			"parked_checkpoint", pt.checkpoint, "checkpoint", cp, "has_checkpoint", ok, "err", err)
		pt.close(false)
		return false
	}
	t.producer, t.retry, t.epoch, t.checkpoint, t.verified = pt.producer, pt.retry, pt.epoch, pt.checkpoint, pt.verified
	if t.retry != nil {
		t.retry.setContext(ctx)
	}
	e.copies.set(t.p, cp)
	e.c.resumed.Add(1)
	e.log.Debug("partition kept across the rebalance", "partition", t.p, "generation", gen, "checkpoint", cp)
	return true
}
