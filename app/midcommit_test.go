package app_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// openTransactions returns the transactional ids of c's partitions whose
// transaction is open (Ongoing) on the broker.
func openTransactions(t *testing.T, admin sarama.ClusterAdmin, c app.Config) []string {
	t.Helper()
	topics := c.EngineConfig(nil).Topics()
	var ids []string
	for p := int32(0); p < c.Partitions; p++ {
		ids = append(ids, topics.TransactionalID(p))
	}
	ta, ok := admin.(sarama.TransactionClusterAdmin)
	if !ok {
		t.Fatal("sarama's cluster admin cannot describe transactions")
	}
	states, err := ta.DescribeTransactions(ids)
	if err != nil {
		t.Fatalf("describe transactions: %v", err)
	}
	var open []string
	for id, st := range states {
		if st.TransactionState == "Ongoing" {
			open = append(open, id)
		}
	}
	return open
}

// TestE2EKillMidCommitRestart kills a static instance with SIGKILL while a
// flush transaction is open (checked on the broker), restarts it, and
// requires it ready well before the 30 s transaction timeout: the new
// instance aborts the dead one's transaction itself instead of waiting for
// the broker to time it out. Counts stay exact.
func TestE2EKillMidCommitRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a process in the middle of its flush")
	}
	const ratings, movies = 40000, 20000
	cc := newChildCluster(t)
	c := cc.cfg
	in := cc.newInstance("k", true)
	in.extraArgs = []string{"--transaction-timeout", "30s", "--commit-interval", "500ms"}
	cc.start(in)
	cc.waitReady(in, 60*time.Second)

	admin := testAdmin(t, c.Brokers)
	p := produceConfig(c, ratings, movies, 7)
	p.Rate = 4000
	produced := make(chan error, 1)
	go func() { _, err := app.Produce(context.Background(), p, nil); produced <- err }()

	hit := false
	for try := 0; try < 20 && !hit; try++ {
		cc.waitReady(in, 60*time.Second)
		// Strike while the broker reports a flush transaction open.
		_ = waitFor(3*time.Second, func() error {
			if len(openTransactions(t, admin, c)) == 0 {
				return errors.New("no open transaction")
			}
			return nil
		})
		in.proc.Kill()
		if err := in.proc.Wait(10 * time.Second); err == nil {
			t.Fatal("instance survived SIGKILL")
		}
		open := openTransactions(t, admin, c)
		hit = len(open) > 0
		began := time.Now()
		cc.start(in)
		cc.waitReady(in, 60*time.Second)
		took := time.Since(began)
		if hit {
			t.Logf("kill %d hit an open transaction (%v): ready %v after the restart", try+1, open, took.Round(time.Millisecond))
			if took > 15*time.Second {
				t.Errorf("ready %v after the restart: it waited for the broker's 30 s transaction timeout", took)
			}
		}
	}
	if !hit {
		t.Fatal("no kill landed while a transaction was open")
	}
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	truthOf(p, truth, sums)
	waitAllExact(t, in.api, truth)
	if err := diffTopics(t, c, truth); err != nil {
		t.Error(err)
	}
}
