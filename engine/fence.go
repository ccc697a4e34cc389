package engine

import (
	"context"
	"time"

	"github.com/IBM/sarama"
)

// A member that dies mid-transaction leaves it open, and the group's offset
// fetch of its partitions is refused (UNSTABLE_OFFSET_COMMIT) until it
// ends: sarama fetches every offset before processing any partition, so
// the next generation would wait for the transaction timeout.
// Initialising a producer with the transaction's id aborts it at once (and
// fences it): abortPredecessor does so for a restarted instance's previous
// run, fenceDeparted (on the leader) for members that left without a word.

// fenceTimeout bounds how long the group's leader spends fencing before it
// hands out a plan: well inside the session timeout, which the other
// members wait in SyncGroup.
func (e *Engine) fenceTimeout() time.Duration {
	return min(2*time.Second, e.cfg.SessionTimeout/3)
}

// fenceTransactions initialises (and closes) the transactional producers
// of aggregate partitions parts and input partitions inputs, several at a
// time. It returns how many it tried and how many of those it could not,
// or had not when ctx ended (sarama cannot cancel an initialisation: those
// go on in the background).
func (e *Engine) fenceTransactions(ctx context.Context, why string, parts, inputs []int32) (tried, failed int) {
	type job struct {
		open  func(context.Context, int32) (sarama.SyncProducer, error)
		stage string
		p     int32
	}
	var jobs []job
	for _, p := range parts {
		jobs = append(jobs, job{e.newTaskProducer, "aggregate", p})
	}
	for _, p := range inputs {
		jobs = append(jobs, job{e.newRekeyProducer, "rekey", p})
	}
	sem := make(chan struct{}, 8)
	done := make(chan bool, len(jobs)) // buffered: a late job never blocks
	go func() {
		for _, j := range jobs {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			go func() {
				defer func() { <-sem }()
				pr, err := j.open(ctx, j.p)
				if err != nil {
					e.log.Warn("could not abort a transaction left open", "why", why, "stage", j.stage, "partition", j.p, "err", err)
					done <- false
					return
				}
				_ = pr.Close()
				done <- true
			}()
		}
	}()
	for finished := range len(jobs) {
		select {
		case ok := <-done:
			if !ok {
				failed++
			}
		case <-ctx.Done():
			return len(jobs), failed + len(jobs) - finished
		}
	}
	return len(jobs), failed
}

// txnDescribeTimeout bounds how long mayBeOpen waits for the transaction
// coordinators' answer before it takes every transaction for open.
const txnDescribeTimeout = 500 * time.Millisecond

// errTxnIDNotFound is Kafka's TRANSACTIONAL_ID_NOT_FOUND: the id has no
// transaction state (never used, or expired).
const errTxnIDNotFound sarama.KError = 105

// finishedTxn holds the transaction states (KIP-664) in which no
// transaction is open.
var finishedTxn = map[string]bool{"Empty": true, "CompleteCommit": true, "CompleteAbort": true, "Dead": true}

// mayBeOpen returns those of parts and inputs whose transaction the
// transaction coordinators do not describe as finished (DescribeTransactions),
// or all of them when the coordinators cannot be asked within
// txnDescribeTimeout. A member that stopped cleanly committed its last
// transaction, so its partitions need no producer initialisation, which
// costs tens to hundreds of milliseconds while the group waits.
//
// Skipping a finished transaction is safe even if its producer (a paused
// zombie) opens another afterwards: a fence here only spares the next
// owner's offset fetch the wait for an open transaction; the next owner's
// own producer, with the same transactional id, fences the zombie anyway.
func (e *Engine) mayBeOpen(parts, inputs []int32) ([]int32, []int32) {
	admin, ok := e.route.adminClient().(sarama.TransactionClusterAdmin)
	if !ok || len(parts)+len(inputs) == 0 {
		return parts, inputs
	}
	ids := make([]string, 0, len(parts)+len(inputs))
	for _, p := range parts {
		ids = append(ids, e.topics.TransactionalID(p))
	}
	for _, p := range inputs {
		ids = append(ids, e.topics.RekeyTransactionalID(p))
	}
	got := make(chan map[string]sarama.TransactionState, 1) // buffered: a late answer never blocks
	go func() {
		// Partial answers are kept: an id missing from them counts as open.
		states, _ := admin.DescribeTransactions(ids)
		got <- states
	}()
	var states map[string]sarama.TransactionState
	select {
	case states = <-got:
	case <-time.After(txnDescribeTimeout):
		return parts, inputs
	}
	open := func(id string) bool {
		st, ok := states[id]
		switch {
		case !ok:
			return true
		case st.ErrorCode == errTxnIDNotFound:
			return false
		case st.ErrorCode != sarama.ErrNoError:
			return true
		}
		return !finishedTxn[st.TransactionState]
	}
	var openParts, openInputs []int32
	for _, p := range parts {
		if open(e.topics.TransactionalID(p)) {
			openParts = append(openParts, p)
		}
	}
	for _, p := range inputs {
		if open(e.topics.RekeyTransactionalID(p)) {
			openInputs = append(openInputs, p)
		}
	}
	return openParts, openInputs
}

// abortPredecessor runs before a static member (--instance-id) joins: it
// fences the transactions of the partitions its previous incarnation
// still holds in the group (until the session timeout). Failures are only
// logged: the broker aborts such a transaction after its timeout anyway.
func (e *Engine) abortPredecessor(ctx context.Context) {
	admin := e.route.adminClient()
	if e.cfg.InstanceID == "" || admin == nil {
		return
	}
	parts, inputs, err := e.lastAssignment(admin)
	if err != nil {
		e.log.Debug("describe group before joining", "err", err)
		return
	}
	if len(parts)+len(inputs) == 0 {
		return
	}
	// Every one, open or not: the previous run may still be alive (a pod
	// replaced while the old one runs on) and open one at any moment.
	_, failed := e.fenceTransactions(ctx, "previous run of this instance", parts, inputs)
	e.log.Info("aborted any transaction left open by this instance's previous run", "partitions", parts, "input_partitions", inputs,
		"failed", failed)
}

// lastAssignment returns the aggregate and input partitions the group
// description gives this instance's static membership (none when it has
// none).
func (e *Engine) lastAssignment(admin sarama.ClusterAdmin) (parts, inputs []int32, err error) {
	groups, err := admin.DescribeConsumerGroups([]string{e.cfg.ApplicationID})
	if err != nil {
		return nil, nil, err
	}
	for _, g := range groups {
		for _, m := range g.Members {
			if m.GroupInstanceId == nil || *m.GroupInstanceId != e.cfg.InstanceID {
				continue
			}
			if asg, err := m.GetMemberAssignment(); err == nil && asg != nil {
				parts = append(parts, asg.Topics[e.topics.Repartition]...)
				inputs = append(inputs, asg.Topics[e.topics.Input]...)
			}
		}
	}
	return parts, inputs, nil
}

// departed returns the aggregate and input partitions that no member of
// the new generation reports having run: their owner left (killed, cut
// off, or cleanly). Nothing when no member reports actives (the group's
// first generation, or every member restarted) or, for inputs, when a
// member does not report its inputs (an older build).
func departed(states map[string]memberState, aggregates, inputs int32) (parts, ins []int32) {
	ran, read := map[int32]bool{}, map[int32]bool{}
	reportsInputs := true
	for _, s := range states {
		for _, p := range s.Actives {
			ran[p] = true
		}
		for _, p := range s.Inputs {
			read[p] = true
		}
		if s.Inputs == nil && len(s.Actives) > 0 {
			reportsInputs = false
		}
	}
	if len(ran) == 0 {
		return nil, nil
	}
	for p := range aggregates {
		if !ran[p] {
			parts = append(parts, p)
		}
	}
	if reportsInputs {
		for p := range inputs {
			if !read[p] {
				ins = append(ins, p)
			}
		}
	}
	return parts, ins
}

// fenceDeparted is run by the group's leader before it hands out a plan:
// it fences the transactions of the partitions whose owner departed,
// within fenceTimeout. A fence still running at the deadline may later
// fence a next owner's producer, which then restarts its session, still
// exact.
func (e *Engine) fenceDeparted(states map[string]memberState, aggregates, inputs int32) {
	if e.cfg.ProcessingGuarantee != ExactlyOnce {
		return
	}
	parts, ins := departed(states, aggregates, inputs)
	if len(parts)+len(ins) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.fenceTimeout())
	defer cancel()
	began := time.Now()
	openParts, openIns := e.mayBeOpen(parts, ins)
	open, failed := e.fenceTransactions(ctx, "owner departed", openParts, openIns)
	e.c.departedFences.Add(int64(open))
	e.log.Info("fenced the transactions of partitions whose owner departed", "partitions", parts,
		"input_partitions", ins, "open", open, "failed", failed, "took", time.Since(began).Round(time.Millisecond))
}
