package engine

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/internal/fencedial"
)

// brokerWatch dials every broker connection of the engine's clients
// (fencedial.Dialer) and asks the cluster for its brokers every pollEvery:
// a broker a recent answer leaves out is fenced, its connections cut and
// dials to it refused until every recent answer lists it again. When a
// leader of the engine's or the coordinators' partitions moves, every
// client looks its leaders up again (observeLeaders). Safe for concurrent
// use.
type brokerWatch struct {
	*fencedial.Dialer // the clients' dialer: fences brokers (observe)
	seeds             []string
	cfg               *sarama.Config // of the watch's own metadata requests

	mu      sync.Mutex
	next    int             // where the next poll starts
	failed  map[string]bool // brokers whose last metadata answer failed
	probes  map[string]*sarama.Broker
	clients map[*watchedClient]struct{} // refreshed on a fence or a leader move
	// topics are the topics whose partition leaders the watch follows;
	// epochs the highest leader epoch seen for each of their partitions.
	topics []string
	epochs map[topicPartition]int32
	// changed is closed, and cleared, at the next fence or leader move
	// (nextChange); changedAt is when (monoNow) the last one was seen.
	changed   chan struct{}
	changedAt time.Duration
}

// topicPartition names one partition of a topic.
type topicPartition struct {
	topic string
	p     int32
}

// pollEvery is how often the watch asks for the cluster's brokers.
const pollEvery = 250 * time.Millisecond

// newBrokerWatch returns a watch for the cluster at seeds, dialing with
// sc's dial timeout and keep-alive, following the partition leaders of
// topics.
func newBrokerWatch(seeds []string, sc *sarama.Config, topics ...string) *brokerWatch {
	cfg := NewSaramaConfig(sc.ClientID)
	cfg.Net.DialTimeout, cfg.Net.ReadTimeout = time.Second, time.Second
	return &brokerWatch{Dialer: fencedial.New(net.Dialer{Timeout: sc.Net.DialTimeout, KeepAlive: sc.Net.KeepAlive}, viewAge),
		seeds: slices.Clone(seeds), cfg: cfg, failed: map[string]bool{}, probes: map[string]*sarama.Broker{},
		topics: slices.DeleteFunc(slices.Clone(topics), func(t string) bool { return t == "" }),
		epochs: map[topicPartition]int32{}}
}

var _ fenceKeeper = (*brokerWatch)(nil)

// errBrokerFenced marks a dial refused because the cluster fenced the
// broker.
var errBrokerFenced = fencedial.ErrFenced

// run polls the cluster's brokers until ctx ends.
func (w *brokerWatch) run(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	defer w.closeProbes()
	for {
		if ans, ok := w.poll(); ok {
			cut := w.Observe(ans.from, ans.addrs, time.Now()) // fences brokers, closing their connections
			for _, a := range cut {
				log.Warn("broker fenced by the cluster: cutting its connections, so requests waiting on it go to the new leaders and coordinators", "broker", a)
			}
			moved := w.observeLeaders(ans.epochs)
			if moved > 0 {
				log.Debug("partition leaders moved; the clients look their leaders and coordinators up again", "partitions", moved)
			}
			if len(cut) > 0 || moved > 0 {
				w.refreshClients()
				w.mu.Lock()
				w.changedAt = monoNow()
				if w.changed != nil {
					close(w.changed)
					w.changed = nil
				}
				w.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pollAnswer is one broker's metadata answer: the brokers it lists and
// the leader epoch of each partition of the watched topics.
type pollAnswer struct {
	from   string
	addrs  []string
	epochs map[topicPartition]int32
}

// poll asks the known brokers in turn for the cluster's brokers and the
// watched topics' leaders, and returns the first answer. Each poll starts
// with the next broker, so every live broker's view is recent (see
// observe); one whose last answer failed is asked last (a silent one
// would hold the poll for the read timeout).
func (w *brokerWatch) poll() (pollAnswer, bool) {
	w.mu.Lock()
	ask := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(w.seeds), w.Listed()...))))
	w.next++
	n := w.next % len(ask)
	ask = append(ask[n:], ask[:n]...)
	slices.SortStableFunc(ask, func(a, b string) int {
		switch {
		case w.failed[a] == w.failed[b]:
			return 0
		case w.failed[a]:
			return 1
		}
		return -1
	})
	w.mu.Unlock()
	for _, addr := range ask {
		if w.Fenced(addr) {
			continue
		}
		b := w.probe(addr)
		// Never a nil list: a nil one asks for every topic of the cluster.
		resp, err := b.GetMetadata(sarama.NewMetadataRequest(w.cfg.Version, append([]string{}, w.topics...)))
		w.mu.Lock()
		w.failed[addr] = err != nil
		w.mu.Unlock()
		if err != nil {
			_ = b.Close() // sarama keeps a connection whose read timed out dead until closed
			continue
		}
		ans := pollAnswer{from: addr, addrs: make([]string, 0, len(resp.Brokers)), epochs: map[topicPartition]int32{}}
		for _, rb := range resp.Brokers {
			ans.addrs = append(ans.addrs, rb.Addr())
		}
		for _, t := range resp.Topics {
			for _, pm := range t.Partitions {
				if errors.Is(pm.Err, sarama.ErrNoError) {
					ans.epochs[topicPartition{t.Name, pm.ID}] = pm.LeaderEpoch
				}
			}
		}
		return ans, true
	}
	return pollAnswer{}, false
}

// observeLeaders takes the leader epochs of one answer and returns how
// many partitions got a new leader (an epoch above the highest seen). A
// client keeps a leader until a request to it fails, so after a move its
// next request waits out a retry backoff; refreshing every client spares
// them that.
func (w *brokerWatch) observeLeaders(epochs map[topicPartition]int32) (moved int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for tp, e := range epochs {
		seen, ok := w.epochs[tp]
		if ok && e <= seen {
			continue
		}
		if ok {
			moved++
		}
		w.epochs[tp] = e
	}
	return moved
}

// probe returns the watch's own connection to addr, opening it if need be.
func (w *brokerWatch) probe(addr string) *sarama.Broker {
	w.mu.Lock()
	b := w.probes[addr]
	if b == nil {
		b = sarama.NewBroker(addr)
		w.probes[addr] = b
	}
	w.mu.Unlock()
	_ = b.Open(w.cfg) // a broker already open says so; a failed dial fails the request
	return b
}

func (w *brokerWatch) closeProbes() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range w.probes {
		_ = b.Close()
	}
}

// nextChange returns a channel closed the next time the watch fences a
// broker or sees a leader move, after it refreshed the clients: a join
// that failed on the old coordinator may be retried at once. A nil watch
// returns nil (never closed).
func (w *brokerWatch) nextChange() <-chan struct{} {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.changed == nil {
		w.changed = make(chan struct{})
	}
	return w.changed
}

// consumerBackoff is sarama's Consumer.Retry.BackoffFunc: afterChange
// within changeWindow after a fence or leader move (the clients already
// know the new leaders), else steady (always, for a nil watch).
func (w *brokerWatch) consumerBackoff(steady time.Duration) func(retries int) time.Duration {
	return func(int) time.Duration {
		if w == nil {
			return steady
		}
		w.mu.Lock()
		at := w.changedAt
		w.mu.Unlock()
		if at > 0 && monoNow()-at < changeWindow {
			return min(steady, afterChange)
		}
		return steady
	}
}

// afterChange and changeWindow: see consumerBackoff.
const (
	afterChange  = 50 * time.Millisecond
	changeWindow = 3 * time.Second
)

// viewAge is how long a broker's answer counts.
const viewAge = 2 * time.Second
