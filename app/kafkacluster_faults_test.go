//go:build unix

package app_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// failureDetection is how long Kafka takes to notice a dead broker: the
// controller fences it after broker.session.timeout.ms (9 s by default,
// which the test cluster keeps) and only then elects new leaders and
// coordinators.
const failureDetection = 9 * time.Second

// TestClusterBrokerFaults runs two instances (clover) on the three-node
// cluster with ratings flowing, injects one broker fault after another,
// and after each checks every output exact and logs the stall it caused
// (lines starting STALL): the longest time a partition of the averages or
// the changelog did not advance (its last stable offset), and how long
// /readyz was not 200 and why.
func TestClusterBrokerFaults(t *testing.T) {
	r := newClusterRig(t, app.StoreClover)
	c := r.cc.cfg
	topics := c.EngineConfig(nil).Topics()
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"kill-leader", func(t *testing.T) {
			// kill -9 of the broker leading changelog/0 (and, with three
			// partitions per topic on three nodes, output partitions
			// too), while transactions run; it stays down until the
			// outputs flow again without it.
			n := r.leaderOf(topics.Changelog, 0)
			r.fault(fmt.Sprintf("kill -9 of node %d, leader of %s/0 (down until outputs flow)", n.ID, topics.Changelog), func() {
				mustNode(t, n.Kill())
				r.waitFlowing(90 * time.Second)
			})
		}},
		{"kill-txn-coordinator", func(t *testing.T) {
			// kill -9 of the transaction coordinator of aggregate
			// partition 0's transactional id. A flush commits every
			// 200 ms and its transaction is open from its first produce
			// (AddPartitionsToTxn) to EndTxn, so a kill at a random
			// moment catches one in flight or the next one begins
			// against the dead coordinator: either way that
			// transaction must be ended by keepstate once Kafka has
			// elected a new coordinator, not by the broker's
			// transaction timeout.
			txnID := topics.TransactionalID(0)
			n, err := r.kc.TxnCoordinator(txnID)
			mustNode(t, err)
			before := strings.Count(r.childLogs(), "committing again")
			stall := r.fault(fmt.Sprintf("kill -9 of node %d, transaction coordinator of %s", n.ID, txnID), func() {
				mustNode(t, n.Kill())
				r.waitFlowing(90 * time.Second)
			})
			r.checkTxnCoordinatorLoss(t, before, stall)
		}},
		{"kill-txn-coordinator-mid-commit", func(t *testing.T) {
			// The same coordinator stopped (SIGSTOP) the moment it
			// reports the transaction Ongoing (AddPartitionsToTxn
			// answered, EndTxn not received), and killed a second later
			// while stopped: the commit is caught between
			// AddPartitionsToTxn and EndTxn and its coordinator dies with
			// it unanswered. keepstate must end it once Kafka has a new
			// coordinator, within the same bound.
			txnID := topics.TransactionalID(0)
			n, err := r.kc.TxnCoordinator(txnID)
			mustNode(t, err)
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			before := strings.Count(r.childLogs(), "committing again")
			stall := r.fault(fmt.Sprintf("SIGSTOP of node %d, transaction coordinator of %s, with the transaction Ongoing, for 1 s, then kill -9", n.ID, txnID), func() {
				testkit.Eventually(t, 60*time.Second, txnID+" ongoing", func() error {
					req := kmsg.NewPtrDescribeTransactionsRequest()
					req.TransactionalIDs = []string{txnID}
					resp, err := req.RequestWith(context.Background(), cl)
					switch {
					case err != nil:
						return err
					case len(resp.TransactionStates) != 1 || resp.TransactionStates[0].State != "Ongoing":
						return fmt.Errorf("transaction states %+v", resp.TransactionStates)
					}
					mustNode(t, n.Pause())
					return nil
				})
				time.Sleep(time.Second) // the fault's shape: a commit is caught in flight
				mustNode(t, n.Kill())
				r.waitFlowing(90 * time.Second)
			})
			r.checkTxnCoordinatorLoss(t, before, stall)
		}},
		{"kill-group-coordinator", func(t *testing.T) {
			// kill -9 of the group coordinator's node while the group is
			// stable: the members heartbeat on to the new coordinator
			// Kafka elects, and the group keeps its generation. The
			// instances' read leases lapse meanwhile (no heartbeat is
			// answered for about the failover), which is all /readyz
			// may report.
			n, err := r.kc.GroupCoordinator(c.ApplicationID)
			mustNode(t, err)
			before := r.assignments()
			r.fault(fmt.Sprintf("kill -9 of node %d, group coordinator, group stable", n.ID), func() {
				mustNode(t, n.Kill())
				r.waitFlowing(90 * time.Second)
			})
			if got := r.generationsSince(before); got != 0 {
				t.Errorf("%d assignments received after the group coordinator's kill, want 0 (no rebalance)", got)
			}
		}},
		{"kill-group-coordinator-in-rebalance", func(t *testing.T) {
			// Instance b leaves (SIGTERM) and comes back: while the group
			// rebalances for its return, kill -9 the group coordinator.
			b := r.inst[1]
			n, err := r.kc.GroupCoordinator(c.ApplicationID)
			mustNode(t, err)
			r.fault(fmt.Sprintf("kill -9 of node %d, group coordinator, while b rejoins", n.ID), func() {
				if err := b.proc.Stop(60 * time.Second); err != nil {
					t.Errorf("stop b: %v", err)
				}
				r.cc.start(b)
				// b serves HTTP before it joins: kill as it begins to.
				testkit.Eventually(t, 60*time.Second, "b serving", func() error {
					code, err := testkit.GetJSON("http://"+b.api+"/healthz", nil)
					if err == nil && code != http.StatusOK {
						err = fmt.Errorf("/healthz %d", code)
					}
					return err
				})
				mustNode(t, n.Kill())
				r.waitReady(b, 120*time.Second)
				r.waitFlowing(120 * time.Second)
			})
		}},
		{"rolling-restart", func(t *testing.T) {
			r.fault("rolling restart of nodes 1, 2, 3 (SIGTERM, start, wait for full ISR)", func() {
				for _, n := range r.kc.Nodes() {
					r.stage()
					mustNode(t, n.Stop(90*time.Second))
					mustNode(t, n.Start())
					testkit.Eventually(t, 120*time.Second, "in sync after restarting a node", r.kc.InSync)
				}
			})
		}},
		{"pause-past-txn-timeout", func(t *testing.T) {
			// Stopped past the transaction timeout (30 s by default):
			// Kafka fences it after its failure detection, its
			// leaderships move, and when it resumes with a stale view
			// nothing it still holds may commit or count twice.
			n := r.leaderOf(topics.Changelog, 1)
			pause := app.Default().TransactionTimeout + 5*time.Second
			r.fault(fmt.Sprintf("SIGSTOP of node %d (leader of %s/1) for %v, then SIGCONT", n.ID, topics.Changelog, pause), func() {
				mustNode(t, n.Pause())
				time.Sleep(pause) // the fault's length, not synchronisation
				mustNode(t, n.Resume())
			})
		}},
		{"isolate-group-coordinator", func(t *testing.T) {
			// The group coordinator's node stopped (SIGSTOP) for 30 s,
			// past the group session (10 s) and Kafka's failure detection:
			// the other two keep the quorum and take over its work.
			n, err := r.kc.GroupCoordinator(c.ApplicationID)
			mustNode(t, err)
			r.fault(fmt.Sprintf("node %d (group coordinator) stopped for 30 s while the other two keep quorum", n.ID), func() {
				mustNode(t, n.Pause())
				time.Sleep(30 * time.Second) // the fault's length
				mustNode(t, n.Resume())
			})
		}},
		{"min-insync-not-met", func(t *testing.T) {
			// Two of three nodes down: no write reaches 2 in-sync
			// replicas (and the controller quorum is lost). Both
			// instances must resume exactly once the nodes are back.
			nodes := r.kc.Nodes()
			r.fault("nodes 2 and 3 killed for 45 s (min.insync.replicas=2 not met)", func() {
				mustNode(t, nodes[1].Kill())
				mustNode(t, nodes[2].Kill())
				// 45 s down: /readyz is sampled and what it said logged
				// (an instance reports Kafka once one of its writes has
				// waited past the producers' retries; an idle one stays
				// ready, see TestWriteWaitsStuck for the report itself).
				said := map[string]bool{}
				for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) { // sampling, not synchronisation
					for _, in := range r.inst {
						code, reason, err := readyz(in.api)
						k := fmt.Sprintf("%s: %d %q %v", in.name, code, regexp.MustCompile(`\d+s`).ReplaceAllString(reason, "…s"), err)
						if !said[k] {
							said[k] = true
							t.Logf("/readyz while 2 of 3 nodes are down: %s", k)
						}
					}
				}
			})
		}},
	}
	for _, s := range steps {
		if !r.step(s.name, func(t *testing.T) {
			s.run(t)
			r.checkExact("after " + s.name)
		}) {
			break
		}
		if err := r.feed.failed(); err != nil {
			t.Fatalf("rating feed: %v", err)
		}
	}
}

// TestClusterBrokerKillRedis: the leader of changelog/0 killed with two
// instances sharing one Redis; every output exact afterwards.
func TestClusterBrokerKillRedis(t *testing.T) {
	r := newClusterRig(t, app.StoreRedis)
	topics := r.cc.cfg.EngineConfig(nil).Topics()
	n := r.leaderOf(topics.Changelog, 0)
	r.fault(fmt.Sprintf("redis: kill -9 of node %d, leader of %s/0 (down until outputs flow)", n.ID, topics.Changelog), func() {
		mustNode(t, n.Kill())
		r.waitFlowing(90 * time.Second)
	})
	r.checkExact("redis, after the leader's kill")
	if err := r.feed.failed(); err != nil {
		t.Fatalf("rating feed: %v", err)
	}
}

// leaderOf returns the node leading topic/p.
func (r *clusterRig) leaderOf(topic string, p int32) *testkit.KafkaNode {
	r.t.Helper()
	n, err := r.kc.Leader(topic, p)
	if err != nil {
		r.t.Fatalf("leader of %s/%d: %v", topic, p, err)
	}
	return n
}

// mustNode fails the test on a node operation's error.
func mustNode(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkTxnCoordinatorLoss logs how keepstate ended the transactions a
// lost transaction coordinator left open (before: the "committing again"
// lines logged before the fault) and fails t when the stall passed the
// bound. Without keepstate ending it, an open transaction waits for the
// broker's transaction timeout (30 s) from its start.
func (r *clusterRig) checkTxnCoordinatorLoss(t *testing.T, before int, stall time.Duration) {
	t.Helper()
	logs := r.childLogs()
	t.Logf("commits retried after the kill: %d; aborts after the coordinator came back: %d",
		strings.Count(logs, "committing again")-before, strings.Count(logs, "transaction aborted after its coordinator came back"))
	if limit := failureDetection + 2*time.Second + 8*time.Second; stall > limit {
		t.Errorf("stall %v after the transaction coordinator's loss, want <= %v (failure detection + 2 s, + 8 s for a loaded machine)", stall, limit)
	}
}
