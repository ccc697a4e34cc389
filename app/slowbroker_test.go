package app_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestSlowBrokerExact runs an instance against a slow broker: every request
// (fetches, produces, heartbeats, transaction calls) is answered 100 ms
// late, and every fourth EndTxn 3 s late. The delays are the injected fault
// (kfake control functions), not synchronisation; kfake only, as Apache
// Kafka cannot be slowed from a test.
//
//   - "slow": 3 s is well inside the transaction timeout. Processing is
//     slower but exact on every output, without group session restarts.
//   - "past the transaction timeout": with a 2 s transaction timeout the
//     broker aborts a transaction whose commit is still on its way, and the
//     late commit is refused. The instance must notice, restart from the
//     committed offsets and still end exact.
func TestSlowBrokerExact(t *testing.T) {
	if testing.Short() {
		t.Skip("slow by design")
	}
	tests := []struct {
		name         string
		txnTimeout   time.Duration
		wantRestarts bool
	}{
		{"slow", 10 * time.Second, false},
		{"past the transaction timeout", 2 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // mostly waiting: the two brokers sleep side by side
			slowBroker(t, tt.txnTimeout, tt.wantRestarts)
		})
	}
}

func slowBroker(t *testing.T, txnTimeout time.Duration, wantRestarts bool) {
	// Sleeping controls are handled out of order (responses still go out
	// in order per connection, as Kafka's do): kfake's in-order sleep
	// queue races with itself when a sleep is queued just as the queue
	// empties (two bsleep.waitQueue goroutines on one request, seen under
	// -race in CI); its out-of-order set hands each woken request to one
	// goroutine through a channel.
	k := testkit.StartKfake(t, testkit.WithKfakeOpts(kfake.SleepOutOfOrder()))
	cl := k.Cluster()
	var endTxns, delayed atomic.Int64
	cl.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		cl.KeepControl()
		d := 100 * time.Millisecond
		if req.Key() == kmsg.EndTxn.Int16() && endTxns.Add(1)%4 == 0 {
			d = 3 * time.Second
			delayed.Add(1)
		}
		cl.SleepControl(func() { time.Sleep(d) })
		return nil, nil, false
	})
	reg := testkit.StartRegistry(t)
	c := testConfig(t, k.Brokers(), reg.URL())
	c.CommitInterval = 200 * time.Millisecond
	c.TransactionTimeout = txnTimeout
	in := startInstance(t, c)

	truth := produceAll(t, c, 2500, 300, 3)
	st := waitOutputsExact(t, c, in.api, truth, "on a slow broker")
	if !wantRestarts && st.Stats.GroupRestarts != 0 {
		t.Errorf("group restarts %d; want 0 on a slow but working broker", st.Stats.GroupRestarts)
	}
	if wantRestarts && st.Stats.TransactionsAborted == 0 {
		t.Errorf("no transaction aborted; want the broker's timeout to have aborted one (the scenario did not happen)")
	}
	if delayed.Load() == 0 {
		t.Errorf("no EndTxn was delayed 3 s; the test did not inject what it claims")
	}
	t.Logf("%d EndTxn requests, %d of them answered 3 s late; %d transactions committed, %d aborted, %d group restarts",
		endTxns.Load(), delayed.Load(), st.Stats.TransactionsCommitted, st.Stats.TransactionsAborted, st.Stats.GroupRestarts)
}
