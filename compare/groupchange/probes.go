package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/app/bench"
	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
)

// probeEvery is how often the flow rates every probe key, and probeAsk how
// often the API prober asks every instance for every probe key.
const (
	probeEvery = 500 * time.Millisecond
	probeAsk   = 100 * time.Millisecond
)

// probeKeys returns one movie id of every partition, above the catalog's
// ids (so that only the probe ratings rate them).
func probeKeys(catalog int64, partitions int) []int64 {
	keys := make([]int64, partitions)
	found := 0
	for id := catalog + 1; found < partitions; id++ {
		p := engine.PartitionFor(engine.Int64Keys.Append(nil, id), int32(partitions))
		if keys[p] == 0 {
			keys[p] = id
			found++
		}
	}
	return keys
}

// probeRating is the n-th rating (from 1) of a probe key: 0, then 10, so
// that the average after n ratings, 10(n-1)/n, grows with n.
func probeRating(n int64) float64 {
	if n == 1 {
		return 0
	}
	return 10
}

// ratingsSeen returns how many probe ratings an average on the output
// topic counts.
func ratingsSeen(avg float64) int64 {
	if avg >= 10 {
		return math.MaxInt64
	}
	return int64(math.Round(10 / (10 - avg)))
}

// sent is a probe rating acknowledged by the broker.
type sent struct {
	n  int64
	at time.Time
}

// probes sends the flowing ratings and the probe ratings, and measures
// how long each probe rating took to reach the output topic and how long
// an instance left a probe key unanswered. Its methods are safe for
// concurrent use.
type probes struct {
	keys      []int64
	part      map[int64]int32
	truth     *bench.Truth
	client    *http.Client
	mu        sync.Mutex
	pending   map[int64][]sent
	rated     map[int64]int64
	stall     map[int64]time.Duration // longest answer of a probe rating this phase
	stallAt   map[int64]time.Time     // when that rating was sent
	apis      map[string]chan struct{}
	lastOK    map[string]time.Time
	asked     map[string]bool // API and key pairs answered at least once
	gap       time.Duration
	gapAt     string
	asks, oks int            // API asks this phase, and those answered
	failed    map[string]int // the others, by status or error
	verbose   io.Writer      // where the first failure of each kind is told, or nil
	sendErr   error
	wg        sync.WaitGroup
	stopFlow  chan struct{}
	flowEnded chan struct{}
}

func newProbes(keys []int64, partitions int, truth *bench.Truth) *probes {
	pr := &probes{keys: keys, part: map[int64]int32{}, truth: truth, client: &http.Client{Timeout: time.Second},
		pending: map[int64][]sent{}, rated: map[int64]int64{}, stall: map[int64]time.Duration{}, stallAt: map[int64]time.Time{},
		apis: map[string]chan struct{}{}, lastOK: map[string]time.Time{}, asked: map[string]bool{}, failed: map[string]int{},
		stopFlow: make(chan struct{}), flowEnded: make(chan struct{})}
	for _, k := range keys {
		pr.part[k] = engine.PartitionFor(engine.Int64Keys.Append(nil, k), int32(partitions))
	}
	return pr
}

// flow sends rate ratings a second, uniform over movies 1..catalog, in
// batches every 100 ms, and every probeEvery one rating of every probe key,
// until stop; a failed send ends it (see err).
func (pr *probes) flow(prod sarama.SyncProducer, encode func(context.Context, avro.Rating) ([]byte, error), topic string, catalog int64, rate int) {
	defer close(pr.flowEnded)
	rnd := rand.New(rand.NewPCG(7, 11))
	per := rate / 10
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-pr.stopFlow:
			return
		case <-tick.C:
		}
		rs := make([]avro.Rating, 0, per+len(pr.keys))
		for range per {
			rs = append(rs, avro.Rating{MovieID: rnd.Int64N(catalog) + 1, Rating: float64(rnd.IntN(21)) / 2})
		}
		probing := n%int(probeEvery/(100*time.Millisecond)) == 0
		if probing {
			pr.mu.Lock()
			for _, k := range pr.keys {
				rs = append(rs, avro.Rating{MovieID: k, Rating: probeRating(pr.rated[k] + 1)})
			}
			pr.mu.Unlock()
		}
		msgs := make([]*sarama.ProducerMessage, len(rs))
		for i, r := range rs {
			v, err := encode(context.Background(), r)
			if err != nil {
				pr.fail(err)
				return
			}
			msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(engine.Int64Keys.Append(nil, r.MovieID)), Value: sarama.ByteEncoder(v)}
		}
		if err := prod.SendMessages(msgs); err != nil {
			pr.fail(fmt.Errorf("send ratings: %w", err))
			return
		}
		at := time.Now()
		for _, r := range rs {
			pr.truth.Add(r)
		}
		if probing {
			pr.mu.Lock()
			for _, k := range pr.keys {
				pr.rated[k]++
				pr.pending[k] = append(pr.pending[k], sent{pr.rated[k], at})
			}
			pr.mu.Unlock()
		}
	}
}

func (pr *probes) fail(err error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.sendErr == nil {
		pr.sendErr = err
	}
}

// endFlow stops the flow and returns the error that ended it early, if any.
func (pr *probes) endFlow() error {
	select {
	case <-pr.stopFlow:
	default:
		close(pr.stopFlow)
	}
	<-pr.flowEnded
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.sendErr
}

// watchOutput reads the output topic from its end (committed records
// only) and resolves the probe ratings an average counts, until ctx ends.
func (pr *probes) watchOutput(ctx context.Context, brokers []string, topic string) error {
	sc := engine.NewSaramaConfig("groupchange-watch")
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	consumer, err := sarama.NewConsumer(brokers, sc)
	if err != nil {
		return err
	}
	parts, err := consumer.Partitions(topic)
	if err != nil {
		consumer.Close()
		return err
	}
	probe := map[int64]bool{}
	for _, k := range pr.keys {
		probe[k] = true
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetNewest)
		if err != nil {
			consumer.Close()
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pc.Close()
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-pc.Messages():
					id, kerr := engine.Int64Keys.Decode(m.Key)
					avg, verr := engine.DecodeDouble(m.Value)
					if kerr == nil && verr == nil && probe[id] {
						pr.answered(id, ratingsSeen(avg), time.Now())
					}
				}
			}
		}()
	}
	go func() { <-ctx.Done(); wg.Wait(); consumer.Close() }()
	return nil
}

// answered resolves key k's probe ratings up to the n-th, seen at now.
func (pr *probes) answered(k, n int64, now time.Time) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	q := pr.pending[k]
	for len(q) > 0 && q[0].n <= n {
		if d := now.Sub(q[0].at); d > pr.stall[k] {
			pr.stall[k], pr.stallAt[k] = d, q[0].at
		}
		q = q[1:]
	}
	pr.pending[k] = q
}

// waitAnswered waits until every probe rating sent before t has reached
// the output topic, up to timeout.
func (pr *probes) waitAnswered(t time.Time, timeout time.Duration) error {
	_, err := waitFor(timeout, "probe ratings on the output topic", func() error {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		for _, k := range pr.keys {
			if q := pr.pending[k]; len(q) > 0 && q[0].at.Before(t) {
				return fmt.Errorf("probe key %d (partition %d): rating %d sent %v ago not seen", k, pr.part[k], q[0].n, time.Since(q[0].at).Round(time.Millisecond))
			}
		}
		return nil
	})
	return err
}

// primed reports whether the first two ratings of every probe key have
// reached the output topic (the keys exist everywhere) and every watched
// instance has answered each.
func (pr *probes) primed() error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, k := range pr.keys {
		if q := pr.pending[k]; pr.rated[k] < 2 || (len(q) > 0 && q[0].n <= 2) {
			return fmt.Errorf("probe key %d: %d ratings sent, the first two not seen yet", k, pr.rated[k])
		}
		// The store is written right after the commit: a new key's first
		// answers may still be 404 for a moment, which is no gap.
		for api := range pr.apis {
			if !pr.asked[fmt.Sprintf("%s key %d", api, k)] {
				return fmt.Errorf("probe key %d not answered by %s yet", k, api)
			}
		}
	}
	return nil
}

// worstStall returns the longest time a probe rating took this phase, with
// its partition and when it was sent, and starts the next phase's count.
func (pr *probes) worstStall() (time.Duration, int32, time.Time) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	var d time.Duration
	var part int32
	var at time.Time
	for k, s := range pr.stall {
		if s > d {
			d, part, at = s, pr.part[k], pr.stallAt[k]
		}
	}
	pr.stall, pr.stallAt = map[int64]time.Duration{}, map[int64]time.Time{}
	return d, part, at
}

// watchAPI asks api for every probe key every probeAsk, each key in its
// own loop, while it is watched; unwatch stops it.
func (pr *probes) watchAPI(api string) {
	stop := make(chan struct{})
	pr.mu.Lock()
	if old, ok := pr.apis[api]; ok {
		close(old)
	}
	pr.apis[api] = stop
	now := time.Now()
	for _, k := range pr.keys {
		// A key it never answers counts from now, not from a first answer.
		pr.lastOK[fmt.Sprintf("%s key %d", api, k)] = now
	}
	pr.mu.Unlock()
	// One loop per key: a slow answer delays no other key's asks.
	for _, k := range pr.keys {
		pr.wg.Add(1)
		go func() {
			defer pr.wg.Done()
			tick := time.NewTicker(probeAsk)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				pr.ask(api, k, stop)
			}
		}()
	}
}

func (pr *probes) ask(api string, k int64, stop chan struct{}) {
	resp, err := pr.client.Get(fmt.Sprintf("http://%s/movies/%d", api, k))
	var m struct {
		Count int64 `json:"count"`
	}
	var body []byte
	ok := err == nil && resp.StatusCode == http.StatusOK
	if err == nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		ok = ok && json.Unmarshal(body, &m) == nil
	}
	now := time.Now()
	id := fmt.Sprintf("%s key %d", api, k)
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.apis[api] != stop {
		return // unwatched meanwhile
	}
	pr.asks++
	if ok {
		pr.oks++
		pr.lastOK[id] = now
		pr.asked[id] = true
		return
	}
	why := failure(resp, err)
	if pr.failed[why]++; pr.failed[why] == 1 && pr.verbose != nil {
		fmt.Fprintf(pr.verbose, "  first %s of the phase: %s key %d: %.300s\n", why, api, k, body)
	}
	if last := pr.lastOK[id]; now.Sub(last) > pr.gap {
		pr.gap, pr.gapAt = now.Sub(last), id
	}
}

// failure names why an ask was not answered.
func failure(resp *http.Response, err error) string {
	switch {
	case err != nil:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "timeout"
		}
		return "error"
	case resp.StatusCode != http.StatusOK:
		return fmt.Sprint(resp.StatusCode)
	}
	return "undecodable"
}

// unwatchAPI stops asking api and forgets when it last answered.
func (pr *probes) unwatchAPI(api string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if stop, ok := pr.apis[api]; ok {
		close(stop)
		delete(pr.apis, api)
	}
	for _, k := range pr.keys {
		delete(pr.lastOK, fmt.Sprintf("%s key %d", api, k))
	}
}

// worstGap returns the longest time a watched instance left a probe key
// unanswered this phase, where, and how many of the phase's asks were
// answered; it starts the next phase's count.
func (pr *probes) worstGap() (time.Duration, string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	d, at := pr.gap, fmt.Sprintf("%s; %d of %d asks answered, others %v", pr.gapAt, pr.oks, pr.asks, pr.failed)
	pr.gap, pr.gapAt, pr.asks, pr.oks, pr.failed = 0, "", 0, 0, map[string]int{}
	return d, at
}

// close stops every API watch.
func (pr *probes) close() {
	pr.mu.Lock()
	for api, stop := range pr.apis {
		close(stop)
		delete(pr.apis, api)
	}
	pr.mu.Unlock()
}
