package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestBrokerWatchPoll: the watch reads the cluster's brokers from a live
// cluster.
func TestBrokerWatchPoll(t *testing.T) {
	k := testkit.StartKfake(t)
	w := newBrokerWatch(k.Brokers(), NewSaramaConfig("t"))
	defer w.closeProbes()
	ans, ok := w.poll()
	if !ok || !slices.Equal(ans.addrs, k.Brokers()) || ans.from != k.Brokers()[0] {
		t.Fatalf("poll: got %v from %q, %v; want %v from %q, true", ans.addrs, ans.from, ok, k.Brokers(), k.Brokers()[0])
	}
}

// TestBrokerWatchRefreshesClients: a client keeps a partition's leader
// from its last lookup; once the watch refreshes its clients (as it does
// when it fences a broker), the client names the new leader without a
// failed request first.
func TestBrokerWatchRefreshesClients(t *testing.T) {
	k := testkit.StartKfake(t, testkit.WithBrokers(2), testkit.WithTopics(1, "t"))
	w := newBrokerWatch(k.Brokers(), NewSaramaConfig("t"))
	leader, was := watchedLeader(t, k, w)
	if err := k.Cluster().MoveTopicPartition("t", 0, 1-was); err != nil {
		t.Fatal(err)
	}
	if got, _ := leader(); got != was {
		t.Fatalf("leader before any refresh: got %d, want the cached %d", got, was)
	}
	w.refreshClients()
	testkit.Eventually(t, 10*time.Second, "the client names the new leader", func() error {
		if got, err := leader(); err != nil || got != 1-was {
			return fmt.Errorf("leader %d, %v; want %d", got, err, 1-was)
		}
		return nil
	})
}

// TestBrokerWatchFollowsLeaderMoves: a partition leader that moves with
// no broker fenced (a controlled shutdown, a preferred leader election)
// has the watch refresh its clients, so that a client names the new
// leader before any request of its fails on the old one, and wakes who
// waits on nextChange (a group join to retry); a poll that finds no
// leader moved refreshes nothing.
func TestBrokerWatchFollowsLeaderMoves(t *testing.T) {
	k := testkit.StartKfake(t, testkit.WithBrokers(2), testkit.WithTopics(1, "t"))
	w := newBrokerWatch(k.Brokers(), NewSaramaConfig("t"), "t", "")
	defer w.closeProbes()
	leader, was := watchedLeader(t, k, w)
	poll := func() int {
		t.Helper()
		ans, ok := w.poll()
		if !ok {
			t.Fatal("poll: no broker answered")
		}
		return w.observeLeaders(ans.epochs)
	}
	if got := poll(); got != 0 {
		t.Fatalf("first poll: %d leaders moved, want 0 (nothing seen before)", got)
	}
	if got := poll(); got != 0 {
		t.Fatalf("poll with no change: %d leaders moved, want 0", got)
	}
	changed := w.nextChange()
	backoff := w.consumerBackoff(500 * time.Millisecond)
	if got, want := backoff(1), 500*time.Millisecond; got != want {
		t.Fatalf("consumer retry backoff before any change: got %v, want %v", got, want)
	}
	if err := k.Cluster().MoveTopicPartition("t", 0, 1-was); err != nil {
		t.Fatal(err)
	}
	if got, _ := leader(); got != was {
		t.Fatalf("leader before the watch saw the move: got %d, want the cached %d", got, was)
	}
	select {
	case <-changed:
		t.Fatal("nextChange closed before the watch saw the move")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, slog.New(slog.DiscardHandler)) }()
	defer func() { cancel(); <-done }()
	testkit.Eventually(t, 10*time.Second, "the client names the new leader", func() error {
		if got, err := leader(); err != nil || got != 1-was {
			return fmt.Errorf("leader %d, %v; want %d", got, err, 1-was)
		}
		return nil
	})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("nextChange not closed after the watch saw the leader move")
	}
	if got, want := backoff(1), afterChange; got != want {
		t.Fatalf("consumer retry backoff just after a leader move: got %v, want %v", got, want)
	}
	w.mu.Lock()
	w.changedAt = monoNow() - changeWindow - time.Millisecond
	w.mu.Unlock()
	if got, want := backoff(1), 500*time.Millisecond; got != want {
		t.Fatalf("consumer retry backoff once the change is older than %v: got %v, want %v", changeWindow, got, want)
	}
	select {
	case <-w.nextChange():
		t.Fatal("a nextChange taken after the move is already closed")
	default:
	}
}

// watchedLeader opens a client of w's clients on k and returns a function
// naming the leader of t/0 as the client knows it, and that leader now.
func watchedLeader(t *testing.T, k *testkit.Kfake, w *brokerWatch) (leader func() (int32, error), now int32) {
	t.Helper()
	c, err := (saramaKafka{brokers: k.Brokers(), watch: w}).NewClient(NewSaramaConfig("t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	leader = func() (int32, error) {
		b, err := c.Leader("t", 0)
		if err != nil {
			return -1, err
		}
		return b.ID(), nil
	}
	now, err = leader()
	if err != nil {
		t.Fatal(err)
	}
	return leader, now
}
