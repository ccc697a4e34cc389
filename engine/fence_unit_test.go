package engine_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
)

// TestUnitFenceOnlyOpenTransactions: of the transactional ids of
// partitions whose owner departed, only one with an open transaction is
// fenced; one whose last transaction committed, one that only
// initialised and one never used are not.
func TestUnitFenceOnlyOpenTransactions(t *testing.T) {
	c := newCluster(t)
	cfg := unitConfig(c, engine.ExactlyOnce)
	a := newRig(t, c, cfg, nil).start(t)
	eventually(t, "a runs its partition", owns(a.e, 0))
	// Partitions 5 to 7 do not exist: no member's producer uses their ids.
	send := func(p sarama.SyncProducer, commit bool) {
		t.Helper()
		if err := p.BeginTxn(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		msg := &sarama.ProducerMessage{Topic: a.topics.Input, Partition: 0, Value: sarama.StringEncoder("not a rating")}
		if _, _, err := p.SendMessage(msg); err != nil {
			t.Fatalf("send: %v", err)
		}
		if commit {
			if err := p.CommitTxn(); err != nil {
				t.Fatalf("commit: %v", err)
			}
		}
	}
	send(txnProducerID(t, c.brokers, a.topics.TransactionalID(5)), false) // open
	send(txnProducerID(t, c.brokers, a.topics.TransactionalID(6)), true)  // committed
	txnProducerID(t, c.brokers, a.topics.RekeyTransactionalID(5))         // initialised only
	// TransactionalID(7): never used.

	parts, inputs := a.e.MayBeOpen([]int32{5, 6, 7}, []int32{5})
	if !slices.Equal(parts, []int32{5}) || len(inputs) != 0 {
		t.Errorf("MayBeOpen(aggregates 5 6 7, inputs 5) = %v, %v; want [5], []", parts, inputs)
	}
}

// TestUnitCleanLeaveNotFenced: a member that stops cleanly committed its
// transactions, so the leader initialises none of its partitions'
// producers when it takes them over, and the counts stay exact.
func TestUnitCleanLeaveNotFenced(t *testing.T) {
	c := newCluster(t)
	cfg := unitConfig(c, engine.ExactlyOnce)
	cfg.Partitions = 3
	a := newRig(t, c, cfg, memstore.New(memstore.Local())).start(t)
	cfgB := cfg
	cfgB.AdvertiseAddr = "127.0.0.1:7002"
	b := newRig(t, c, cfgB, memstore.New(memstore.Local())).start(t)
	eventually(t, "a and b share the partitions", func() error {
		na, nb := a.e.Stats().PartitionsRunning, b.e.Stats().PartitionsRunning
		if na+nb != 3 || na == 0 || nb == 0 {
			return fmt.Errorf("a runs %d, b %d; want 3 in all, each some", na, nb)
		}
		return nil
	})
	var sent []rating
	for p := range int32(3) {
		for _, id := range moviesOf(p, 3, 2) {
			sent = append(sent, rating{id, float64(2 + p)})
		}
	}
	a.rate(t, 0, sent...)
	eventually(t, "a and b process the ratings", func() error {
		if n := a.e.Stats().RecordsProcessed + b.e.Stats().RecordsProcessed; n != int64(len(sent)) {
			return fmt.Errorf("processed %d ratings, want %d", n, len(sent))
		}
		return nil
	})
	before := a.e.DepartedFences()
	b.stop(t)
	eventually(t, "a runs every partition after b left", owns(a.e, 0, 1, 2))
	if got := a.e.DepartedFences() - before; got != 0 {
		t.Errorf("transactions fenced after a clean leave: got %d, want 0", got)
	}
	more := []rating{{moviesOf(0, 3, 1)[0], 9}, {moviesOf(1, 3, 1)[0], 9}, {moviesOf(2, 3, 1)[0], 9}}
	a.rate(t, 0, more...)
	sent = append(sent, more...)
	eventually(t, "a stores every rating", a.storeHas(totals(sent)))
}
