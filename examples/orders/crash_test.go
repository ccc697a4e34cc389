package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// crashInstance is one orders process of the crash test.
type crashInstance struct {
	name, dataDir, api string
	proc               *testkit.Process
}

// crashCluster runs orders instances as child processes on one broker
// (and, for redis, one Redis server).
type crashCluster struct {
	t   *testing.T
	bin string
	cfg app.Config
}

// start runs the instance's process (again, on the same data dir).
func (cc *crashCluster) start(in *crashInstance) {
	c := cc.cfg
	args := []string{"run", "--brokers", strings.Join(c.Brokers, ","),
		"--application-id", c.ApplicationID, "--input-topic", c.InputTopic, "--output-topic", c.OutputTopic,
		"--store", c.Store, "--data-dir", in.dataDir, "--redis-url", c.RedisURL,
		"--http-addr", in.api, "--advertise-addr", in.api, "--instance-id", in.name,
		"--commit-interval", "200ms", "--session-timeout", "3s", "--partitions", "3", "--fsync=false",
		"--log-level", childLogLevel(), "--peer-secret", testPeerSecret}
	in.proc = testkit.StartProcess(cc.t, in.name, cc.bin, nil, args...)
}

// waitReady waits until the instance answers /readyz with 200.
func (cc *crashCluster) waitReady(in *crashInstance, timeout time.Duration) {
	cc.t.Helper()
	testkit.Eventually(cc.t, timeout, in.name+" ready", func() error {
		if in.proc.Exited() {
			return fmt.Errorf("%s exited: %v", in.name, in.proc.Err())
		}
		if code, err := testkit.GetJSON("http://"+in.api+"/readyz", nil); err != nil || code != http.StatusOK {
			return fmt.Errorf("%s not ready: %d %v", in.name, code, err)
		}
		return nil
	})
}

// runOrdersCrashTest produces orders continuously while one of two
// instances at a time is killed with SIGKILL and started again on the same
// data dir. Afterwards every output must equal the ground truth exactly:
// each customer's document asked on either instance (routed to its
// owner), the index query for totals of at least 1000 asked on one
// instance (merged across both), the last committed changelog and output
// record of each customer, and the dead letters.
func runOrdersCrashTest(t *testing.T, store string) {
	const (
		chunk     = 2000 // orders per produce call
		maxChunks = 60   // then the load stops, so that not every customer reaches 1000
		customers = 1000
		kills     = 6
		pauses    = 2
		seed      = 11
	)
	brokers := testkit.Kafka(t)
	// The children get their settings as flags (start); of the config they
	// use only the names, the store and the Redis URL.
	cc := &crashCluster{t: t, bin: ordersBinary(t), cfg: testConfig(t, brokers)}
	c := &cc.cfg
	c.Store = store
	if store == app.StoreRedis {
		c.RedisURL = testkit.StartRedis(t).URL()
	}
	// The input topic exists before the instances and the producer race
	// to create it.
	if err := app.EnsureTopic(brokers, engine.NewSaramaConfig("orders-test"), c.InputTopic, 3); err != nil {
		t.Fatalf("create %s: %v", c.InputTopic, err)
	}
	rnd := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))

	inst := []*crashInstance{
		{name: "a", dataDir: t.TempDir(), api: testkit.FreeAddr(t)},
		{name: "b", dataDir: t.TempDir(), api: testkit.FreeAddr(t)},
	}
	// Both at once: they race to create the internal topics, and the one
	// that loses must wait for the other's topics to reach the broker's
	// metadata (engine.ensureTopics) rather than give up.
	for _, in := range inst {
		cc.start(in)
	}
	for _, in := range inst {
		cc.waitReady(in, 60*time.Second)
	}

	// Orders flow in chunks until the kills are over (or maxChunks were
	// sent), so that every kill strikes while instances hold unflushed
	// state. The test goroutine reads sent only after produced is received.
	var sent []produceConfig
	stop := make(chan struct{})
	produced := make(chan error, 1)
	go func() {
		for i := uint64(0); ; i++ {
			if i == maxChunks {
				<-stop
			}
			select {
			case <-stop:
				produced <- nil
				return
			default:
			}
			p := defaultProduce()
			p.Brokers, p.Topic = brokers, c.InputTopic
			p.Count, p.Customers, p.Seed, p.BadEvery, p.Rate = chunk, customers, seed+i, 500, 1500
			n, err := produceOrders(context.Background(), p, nil)
			if err == nil && n != chunk {
				err = fmt.Errorf("produced %d orders, want %d", n, chunk)
			}
			if err != nil {
				produced <- err
				return
			}
			sent = append(sent, p)
		}
	}()

	// Half the kills restart the victim at once: with its static member
	// id it gets its partitions back without a rebalance, restoring from
	// its own store. The other half restart it only once the other
	// instance runs every partition (the victim's session expired): the
	// partitions move there, are restored from the changelog, and move
	// back when the victim returns.
	start := time.Now()
	// First, while orders flow, pauses: SIGSTOP one instance until the
	// other runs every partition (its session expired), then SIGCONT. The
	// paused one wakes up as a zombie holding a transaction: the broker
	// must abort it, and its late writes must reach no output.
	for n, attempts := 0, 0; n < pauses; {
		if attempts++; attempts > 3*pauses {
			t.Fatalf("only %d of %d pauses hit an instance holding unflushed state", n, pauses)
		}
		time.Sleep(time.Duration(300+rnd.IntN(900)) * time.Millisecond) // a random moment, not synchronisation
		v := rnd.IntN(len(inst))
		for _, in := range inst {
			cc.waitReady(in, 60*time.Second)
		}
		if pausePastSession(t, inst[v], inst[1-v]) {
			n++
			t.Logf("pause %d after %v: SIGSTOP %s until %s ran every partition; its late transaction was aborted",
				n, time.Since(start).Round(time.Millisecond), inst[v].name, inst[1-v].name)
		}
	}
	for k := 1; k <= kills; k++ {
		time.Sleep(time.Duration(300+rnd.IntN(900)) * time.Millisecond) // a random moment, not synchronisation
		v := rnd.IntN(len(inst))
		victim, other := inst[v], inst[1-v]
		// kfake keeps a member killed while still joining forever; strike
		// only members that finished joining (as app/crash_test.go does).
		for _, in := range inst {
			cc.waitReady(in, 60*time.Second)
		}
		victim.proc.Kill()
		how := "restarted at once"
		if k%2 == 0 {
			waitRunsAll(t, other)
			how = "restarted after " + other.name + " ran every partition"
		}
		t.Logf("kill %d after %v: SIGKILL %s, %s", k, time.Since(start).Round(time.Millisecond), victim.name, how)
		cc.start(victim)
	}
	close(stop)
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	tr := newTruth()
	for _, p := range sent {
		tr.addProduced(p)
	}
	t.Logf("%d orders in %d chunks: %d customers, %d with a total >= 1000, %d bad orders",
		len(sent)*chunk, len(sent), len(tr.customers), len(tr.atLeast(1000)), tr.bad)
	if len(sent) < 3 || len(tr.atLeast(1000)) == 0 || len(tr.atLeast(1000)) == len(tr.customers) {
		t.Fatalf("the load does not test much: %d chunks, %d of %d customers >= 1000", len(sent), len(tr.atLeast(1000)), len(tr.customers))
	}
	for _, in := range inst {
		cc.waitReady(in, 60*time.Second)
	}

	apis := []string{inst[0].api, inst[1].api}
	testkit.Eventually(t, 90*time.Second, "every customer exact on both instances", func() error { return checkCustomers(apis, tr) })
	testkit.Eventually(t, 30*time.Second, "index query exact", func() error { return checkIndex(inst[0].api, tr) })
	jc := c.JobConfig(nil, CustomersTable, c.InputTopic, c.OutputTopic)
	testkit.Eventually(t, 60*time.Second, "last changelog record of every customer exact", func() error {
		return checkLastTotals(brokers, jc.ChangelogTopic, tr)
	})
	testkit.Eventually(t, 60*time.Second, "last output record of every customer exact", func() error {
		return checkLastTotals(brokers, c.OutputTopic, tr)
	})
	testkit.Eventually(t, 60*time.Second, "every bad order dead-lettered once", func() error {
		return checkDLQ(brokers, jc.DLQTopic, c.InputTopic, tr.bad)
	})
	t.Logf("exact after %d kills, %v in all", kills, time.Since(start).Round(time.Millisecond))
}

// pausePastSession stops victim (SIGSTOP) until other runs every
// partition, resumes it, and reports whether the victim then aborted a
// transaction (it was paused holding unflushed state); a pause that did
// not is reported false and does not count (testkit.PausePastSession).
func pausePastSession(t *testing.T, victim, other *crashInstance) bool {
	t.Helper()
	return testkit.PausePastSession(t, testkit.Pause{
		Victim: victim.proc, Name: victim.name, Other: other.name,
		TakenOver: func() error { return runsAll(other) },
		Aborted: func() (int64, error) {
			st, err := jobStats(victim)
			return st.TransactionsAborted, err
		},
	})
}

// jobStats returns the engine counters of in.
func jobStats(in *crashInstance) (engine.Stats, error) {
	var st testkit.APIStats[engine.Stats]
	code, err := testkit.GetJSON("http://"+in.api+"/api/stats", &st)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("/api/stats of %s: status %d", in.name, code)
	}
	return st.Stats, err
}

// runsAll returns nil if in runs all 3 partitions of the job, and
// otherwise what it runs.
func runsAll(in *crashInstance) error {
	st, err := jobStats(in)
	if err == nil && st.PartitionsRunning != 3 {
		err = fmt.Errorf("%s runs %d partitions", in.name, st.PartitionsRunning)
	}
	return err
}

// waitRunsAll waits until in runs all 3 partitions of the job.
func waitRunsAll(t *testing.T, in *crashInstance) {
	t.Helper()
	testkit.Eventually(t, 60*time.Second, in.name+" runs every partition", func() error { return runsAll(in) })
}

// TestE2EOrdersCrashExactnessClover: 2 instances, each with its own clover
// store, 2 pauses past the session timeout and 6 kill -9 (3 of them
// restarted past the session timeout) while orders flow.
func TestE2EOrdersCrashExactnessClover(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test takes a minute")
	}
	runOrdersCrashTest(t, app.StoreClover)
}

// TestE2EOrdersCrashExactnessRedis: 2 instances sharing one Redis, 2
// pauses past the session timeout and 6 kill -9 while orders flow.
func TestE2EOrdersCrashExactnessRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test takes a minute")
	}
	runOrdersCrashTest(t, app.StoreRedis)
}

// childLogLevel is the children's log level: info, or
// KEEPSTATE_TEST_CHILD_LOG_LEVEL when debugging.
func childLogLevel() string {
	if l := os.Getenv("KEEPSTATE_TEST_CHILD_LOG_LEVEL"); l != "" {
		return l
	}
	return "info"
}
