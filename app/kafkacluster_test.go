//go:build unix

package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/fencedial"
	"github.com/keepstate/keepstate/internal/testkit"
)

// clusterRig is two keepstate instances (child processes) on the shared
// three-node Kafka cluster, their topics created with replication factor
// 3 and min.insync.replicas 2, ratings flowing into the input topic, and
// a monitor of how the outputs advance.
type clusterRig struct {
	t    *testing.T
	kc   *testkit.KafkaCluster
	cc   *crashCluster
	inst []*crashInstance
	feed *ratingFeed
	mon  *stallMonitor
	// stages are the times a fault in several stages (a rolling restart)
	// began each one (see stage); fault reports each stage's stall.
	stages []time.Time
}

// stage marks the start of the next stage of the fault being injected:
// fault then also reports the stall of each stage and how long after
// Kafka fenced that stage's broker it ended, which the whole fault's
// figure cannot (a rolling restart's fences merge there).
func (r *clusterRig) stage() { r.stages = append(r.stages, time.Now()) }

// clusterMovies is how many distinct movies the feed rates.
const clusterMovies = 500

// newClusterRig starts the rig on store (app.StoreClover or StoreRedis)
// and waits until both instances are ready and the outputs advance.
func newClusterRig(t *testing.T, store string) *clusterRig {
	kc := testkit.RealKafkaCluster(t)
	kc.Restore(t, 90*time.Second)
	reg := testkit.StartRegistry(t)
	cc := &crashCluster{t: t, bin: testkit.Keepstate(t), cfg: testConfig(t, kc.Brokers(), reg.URL())}
	if store == app.StoreRedis {
		useRedis(t, &cc.cfg)
	}
	c := cc.cfg
	createReplicated(t, c.Brokers, c.InputTopic)
	r := &clusterRig{t: t, kc: kc, cc: cc}
	for _, name := range []string{"a", "b"} {
		in := cc.newInstance(name, true)
		in.extraArgs = []string{"--replication-factor", "3", "--min-insync-replicas", "2", "--session-timeout", "10s"}
		r.inst = append(r.inst, in)
		cc.start(in)
	}
	for _, in := range r.inst {
		cc.waitReady(in, 90*time.Second)
	}
	fences := fencedial.New(net.Dialer{Timeout: time.Second}, time.Second)
	r.mon = startStallMonitor(t, c.Brokers, []string{c.OutputTopic, c.EngineConfig(nil).Topics().Changelog}, fences)
	r.feed = startFeed(t, c, 400, fences)
	t.Cleanup(r.feed.stop)
	// Later tests share the cluster: leave every node running and in sync
	// (first of the cleanups, so that the feed's last send can end).
	t.Cleanup(func() { kc.Restore(t, 120*time.Second) })
	r.waitSettled(60 * time.Second)
	// Every partition advances after the settle: a hand-over's new
	// actives have restored and resumed before the first fault, which
	// would otherwise measure them.
	settled := time.Now()
	testkit.Eventually(t, 60*time.Second, "every output partition advancing after the settle", func() error {
		return r.mon.allAdvancedSince(settled)
	})
	return r
}

// waitSettled waits until the group has no warm-up left and runs every
// partition, one instance at least one, so that the first fault does not
// fall in a hand-over (a warm-up's rejoin is a rebalance of its own).
func (r *clusterRig) waitSettled(timeout time.Duration) {
	r.t.Helper()
	testkit.Eventually(r.t, timeout, "no warm-up left and every partition active", func() error {
		actives := 0
		for _, in := range r.inst {
			var st struct {
				Partitions map[string][]engine.PartitionRole `json:"partitions"`
			}
			if _, err := testkit.GetJSON("http://"+in.api+"/api/stats", &st); err != nil {
				return err
			}
			mine := 0
			for _, roles := range st.Partitions {
				for _, pr := range roles {
					switch pr.Role {
					case engine.RoleWarmup:
						return fmt.Errorf("%s warms up partition %d", in.name, pr.Partition)
					case engine.RoleActive:
						mine++
					}
				}
			}
			if mine == 0 {
				return fmt.Errorf("%s runs no partition", in.name)
			}
			actives += mine
		}
		if actives != 3 {
			return fmt.Errorf("%d actives, want 3", actives)
		}
		return nil
	})
}

// createReplicated creates topic with 3 partitions, replication factor 3
// and min.insync.replicas 2.
func createReplicated(t *testing.T, brokers []string, topic string) {
	t.Helper()
	two := "2"
	err := testAdmin(t, brokers).CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 3,
		ConfigEntries: map[string]*string{"min.insync.replicas": &two}}, false)
	if err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// waitFlowing waits until every monitored partition has advanced within
// the last second.
func (r *clusterRig) waitFlowing(timeout time.Duration) {
	r.t.Helper()
	testkit.Eventually(r.t, timeout, "every output partition advancing", func() error {
		return r.mon.allAdvancedSince(time.Now().Add(-time.Second))
	})
}

// fault runs inject (which breaks something and, unless it returns early,
// repairs it), then waits until the outputs flow again and the cluster is
// in sync, and logs the stall it caused: the longest time a partition of
// the averages or the changelog committed nothing, from the fault until
// flowing again, by its commit markers (commitStall; the polling
// monitor's figure beside it), and how long each instance's /readyz was
// not 200 (with the last reason it gave). It returns the stall.
func (r *clusterRig) fault(name string, inject func()) time.Duration {
	r.t.Helper()
	from := time.Now()
	gens := r.assignments()
	ready := startReadyWatch(r.inst)
	r.stages = nil
	inject()
	r.kc.Restore(r.t, 120*time.Second)
	r.waitFlowing(120 * time.Second)
	until := time.Now()
	r.stageStalls(name, until)
	polled, pwhere, _ := r.mon.longestGap(from, until)
	// The stall by the partitions' own commit markers: when each
	// transaction became readable, without the polling monitor's failover.
	c := r.cc.cfg
	topics := []string{c.OutputTopic, c.EngineConfig(nil).Topics().Changelog}
	stall, where, ended, err := commitStall(context.Background(), c.Brokers, topics, from, until, false)
	if err != nil {
		r.t.Errorf("stall of %s by commit markers: %v", name, err)
		stall, where, ended = r.mon.longestGap(from, until)
	}
	detected := "Kafka fenced no broker"
	if d, ok := r.mon.fencedAfter(from, until, ended); ok {
		// How long after Kafka's own failure detection the longest stall
		// ended: the bound. (A stall that began after the fault
		// is not "stall - d".)
		detected = fmt.Sprintf("Kafka fenced a broker after %v, the stall ended %v after that", d.Round(10*time.Millisecond), ended.Sub(from.Add(d)).Round(10*time.Millisecond))
	}
	r.t.Logf("STALL %s: %v (longest on %s, ended %s, by commit markers; polled %v on %s; fault from %s, whole fault %v); %s; %s; %s; assignments received: %d (each instance one per rebalance)",
		name, stall.Round(10*time.Millisecond), where, ended.Format("15:04:05.000"), polled.Round(10*time.Millisecond), pwhere,
		from.Format("15:04:05.000"), until.Sub(from).Round(100*time.Millisecond), detected, r.inputSaid(where, from, ended), ready.stop(), r.generationsSince(gens))
	return stall
}

// inputSaid says how long the feed's input to the partition of where
// ("topic/p") stopped arriving before ended, and how long after it
// resumed the stall ended: a stall that ended shortly after its input
// came back is the feed's (its producer waited on the failed broker).
func (r *clusterRig) inputSaid(where string, from, ended time.Time) string {
	i := strings.LastIndexByte(where, '/')
	p, err := strconv.Atoi(where[i+1:])
	if i < 0 || err != nil {
		return "input gap unknown"
	}
	gap, resumed := r.feed.inputGap(p, from, ended)
	if resumed.IsZero() {
		return fmt.Sprintf("input partition %d: no send acknowledged for %v", p, gap.Round(10*time.Millisecond))
	}
	return fmt.Sprintf("input partition %d: longest gap between acknowledged sends %v, resumed %s, %v before the stall ended",
		p, gap.Round(10*time.Millisecond), resumed.Format("15:04:05.000"), ended.Sub(resumed).Round(10*time.Millisecond))
}

// stageStalls logs, for a fault injected in stages (see stage), each
// stage's stall by commit markers (lines starting STALL) and how long
// after Kafka fenced a broker in that stage it ended. A stage runs until
// the next one begins, the last until until; a stall still on when the
// next stage begins counts in that one, from its start.
func (r *clusterRig) stageStalls(name string, until time.Time) {
	r.t.Helper()
	c := r.cc.cfg
	topics := []string{c.OutputTopic, c.EngineConfig(nil).Topics().Changelog}
	for i, from := range r.stages {
		to, last := until, i+1 == len(r.stages)
		if !last {
			to = r.stages[i+1]
		}
		stall, where, ended, err := commitStall(context.Background(), c.Brokers, topics, from, to, !last)
		if err != nil {
			r.t.Errorf("stall of %s, stage %d, by commit markers: %v", name, i+1, err)
			continue
		}
		detected := "Kafka fenced no broker"
		if d, ok := r.mon.fencedAfter(from, to, ended); ok {
			detected = fmt.Sprintf("Kafka fenced a broker after %v, the stall ended %v after that", d.Round(10*time.Millisecond), ended.Sub(from.Add(d)).Round(10*time.Millisecond))
		}
		r.t.Logf("STALL %s, stage %d: %v (longest on %s, ended %s, by commit markers; stage from %s, %v long); %s",
			name, i+1, stall.Round(10*time.Millisecond), where, ended.Format("15:04:05.000"), from.Format("15:04:05.000"), to.Sub(from).Round(100*time.Millisecond), detected)
	}
}

// checkExact pauses the feed, waits until every output is exact (API on
// both instances, last changelog record and average per movie, the
// repartition topic), and resumes the feed.
//
// The truth is computed from the input topic itself: a send that failed
// on a broker's loss may still have written its ratings (the producer
// cannot tell), so the feed's own count is only compared and logged.
func (r *clusterRig) checkExact(when string) {
	r.t.Helper()
	fed := r.feed.pause()
	defer r.feed.resume()
	c := r.cc.cfg
	truth := inputTruth(r.t, c)
	if !maps.Equal(fed, truth) {
		r.t.Logf("%s: the input topic holds ratings of %d movies, the feed's acknowledged sends %d (failed sends: %d); checking against the input",
			when, len(truth), len(fed), r.feed.failures())
	}
	for _, in := range r.inst {
		r.waitReady(in, 120*time.Second)
	}
	st := waitOutputsExact(r.t, c, "http://"+r.inst[0].api, truth, when)
	waitAllExact(r.t, r.inst[1].api, truth)
	if err := diffRepartition(r.t, c); err != nil {
		r.t.Errorf("%s: %v", when, err)
	}
	r.t.Logf("%s: exact on %d movies (%d ratings); a: %d transactions committed, %d aborted, %d group restarts",
		when, len(truth), ratingsIn(truth), st.Stats.TransactionsCommitted, st.Stats.TransactionsAborted, st.Stats.GroupRestarts)
}

// ratingsIn returns how many ratings truth counts.
func ratingsIn(truth map[int64]testkit.Movie) int64 {
	var n int64
	for _, m := range truth {
		n += m.Count
	}
	return n
}

// inputTruth reads every rating in c's input topic and returns each
// movie's count and average, summed in offset order (a movie's ratings are
// all in one partition, which is the order the job sums them in).
func inputTruth(t *testing.T, c app.Config) map[int64]testkit.Movie {
	t.Helper()
	reg, err := app.OpenRegistry(context.Background(), app.Config{SchemaRegistry: c.SchemaRegistry}, nil)
	if err != nil {
		t.Fatal(err)
	}
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	for _, m := range readTopic(t, c.Brokers, c.InputTopic) {
		rt, err := reg.DecodeRating(context.Background(), m.Value)
		if err != nil {
			t.Fatalf("input %d/%d: %v", m.Partition, m.Offset, err)
		}
		mv := truth[rt.MovieID]
		mv.MovieID = rt.MovieID
		mv.Count++
		sums[rt.MovieID] += rt.Rating
		mv.Rating = sums[rt.MovieID] / float64(mv.Count)
		truth[rt.MovieID] = mv
	}
	return truth
}

// waitReady waits until in answers /readyz with 200 (crashCluster's
// waitReady fails its own test, the parent of a subtest).
func (r *clusterRig) waitReady(in *crashInstance, timeout time.Duration) {
	r.t.Helper()
	testkit.Eventually(r.t, timeout, in.name+" ready", func() error {
		if in.proc.Exited() {
			return fmt.Errorf("%s exited: %v", in.name, in.proc.Err())
		}
		if !in.ready() {
			return fmt.Errorf("%s not ready", in.name)
		}
		return nil
	})
}

// step runs fn as subtest name of the rig's test, with the rig's helpers
// failing the subtest.
func (r *clusterRig) step(name string, fn func(t *testing.T)) bool {
	parent := r.t
	defer func() { r.t = parent }()
	return parent.Run(name, func(t *testing.T) {
		r.t = t
		t.Cleanup(func() { r.kc.Restore(t, 120*time.Second) })
		fn(t)
	})
}

// assignments counts, per instance process, the "partitions assigned"
// lines (one per group generation it joined) in its log.
func (r *clusterRig) assignments() map[*testkit.Process]int {
	out := map[*testkit.Process]int{}
	for _, in := range r.inst {
		out[in.proc] = strings.Count(in.proc.Output(), "partitions assigned")
	}
	return out
}

// generationsSince returns how many group generations the instances
// joined since before (an assignments result); a restarted instance's
// whole log counts.
func (r *clusterRig) generationsSince(before map[*testkit.Process]int) int {
	n := 0
	for p, c := range r.assignments() {
		n += c - before[p]
	}
	return n
}

// childLogs returns the instances' output so far.
func (r *clusterRig) childLogs() string {
	var b strings.Builder
	for _, in := range r.inst {
		b.WriteString(in.proc.Output())
	}
	return b.String()
}

// ratingFeed sends generated ratings into a topic, each partition's in
// small synchronous batches of its own sender and producer, idempotent,
// whose retries outlast a broker failover, and keeps the ground truth of
// what was acknowledged. One sender per partition, as the Java producer
// keeps one queue per partition: a batch held by a silent leader delays only its
// partition, and the other partitions' ratings go on arriving (one batch
// across all partitions stalled the whole feed until a paused broker woke,
// which the stall monitor then counted as keepstate's).
type ratingFeed struct {
	mu      sync.Mutex
	truth   map[int64]testkit.Movie
	sums    map[int64]float64
	err     error
	nFailed int // sends that failed
	paused  bool
	cond    *sync.Cond
	quit    chan struct{}
	done    chan struct{}
	stopped sync.Once
	// queued counts ratings generated and not yet acknowledged or failed.
	queued atomic.Int64
	// acked holds, per input partition, when each of its sends was
	// acknowledged (see inputGap).
	acked [feedPartitions][]time.Time
}

// feedPartitions is the input topic's partition count (createReplicated).
const feedPartitions = 3

// startFeed sends about rate ratings per second to c's input topic until
// stop; a send error ends it (reported by pause and stop as a test error).
// Its connections are dialed by fences.
func startFeed(t *testing.T, c app.Config, rate int, fences *fencedial.Dialer) *ratingFeed {
	t.Helper()
	reg, err := app.OpenRegistry(context.Background(), app.Config{SchemaRegistry: c.SchemaRegistry}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := engine.NewSaramaConfig("cluster-feed")
	sc.Producer.Return.Successes = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Idempotent = true
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Partitioner = engine.NewJavaPartitioner
	sc.Producer.Retry.Max = 1200 // x 100 ms: outlasts every fault of these tests
	sc.Producer.Retry.Backoff = 100 * time.Millisecond
	sc.Metadata.Retry.Max = 5
	// Short request timeouts, so that a request held by a paused broker
	// is retried on the new leader soon after Kafka fenced it (sarama's
	// default read timeout, 30 s, held the feed for a whole 30 s pause,
	// which the stall monitor then counted as keepstate's).
	sc.Producer.Timeout = 2 * time.Second
	sc.Net.ReadTimeout = 3 * time.Second
	sc.Net.Proxy.Enable, sc.Net.Proxy.Dialer = true, fences
	// A producer per partition: sarama dispatches a topic's messages in
	// one goroutine, so a partition whose leader holds a request blocks
	// the others' once its buffer is full.
	prs := make([]sarama.SyncProducer, feedPartitions)
	for p := range prs {
		if prs[p], err = sarama.NewSyncProducer(c.Brokers, sc); err != nil {
			t.Fatal(err)
		}
	}
	f := &ratingFeed{truth: map[int64]testkit.Movie{}, sums: map[int64]float64{}, quit: make(chan struct{}), done: make(chan struct{})}
	f.cond = sync.NewCond(&f.mu)
	const batch = 20
	subject := c.InputTopic + "-value"
	queues := make([]chan *sarama.ProducerMessage, feedPartitions)
	var senders sync.WaitGroup
	for p := range queues {
		queues[p] = make(chan *sarama.ProducerMessage, 4*rate) // a few seconds of the partition's ratings
		senders.Go(func() {
			defer prs[p].Close()
			f.send(p, prs[p], queues[p], batch)
		})
	}
	go func() {
		defer close(f.done)
		defer senders.Wait()
		defer func() {
			for _, q := range queues {
				close(q)
			}
		}()
		g := app.NewGenerator(clusterMovies, 7)
		tick := time.NewTicker(time.Second * batch / time.Duration(rate))
		defer tick.Stop()
		for {
			f.mu.Lock()
			for f.paused {
				f.cond.Wait()
			}
			f.mu.Unlock()
			select {
			case <-f.quit:
				return
			case <-tick.C:
			}
			for range batch {
				rt := g.Next()
				v, err := reg.EncodeRating(context.Background(), subject, rt)
				if err != nil {
					f.fail(err)
					return
				}
				key := engine.Int64Keys.Append(nil, rt.MovieID)
				m := &sarama.ProducerMessage{Topic: c.InputTopic, Key: sarama.ByteEncoder(key), Value: sarama.ByteEncoder(v),
					Metadata: testkit.Movie{MovieID: rt.MovieID, Rating: rt.Rating}}
				select {
				case queues[engine.PartitionFor(key, feedPartitions)] <- m:
					f.queued.Add(1)
				default: // its partition's sender is held up: never sent, not in the truth
				}
			}
		}
	}()
	return f
}

// send sends the ratings of q (input partition p) in batches of at most
// max, each as soon as the one before it is acknowledged, and adds the
// acknowledged ones to the truth.
func (f *ratingFeed) send(p int, pr sarama.SyncProducer, q <-chan *sarama.ProducerMessage, max int) {
	for m := range q {
		msgs := []*sarama.ProducerMessage{m}
	fill:
		for len(msgs) < max {
			select {
			case m, ok := <-q:
				if !ok {
					break fill
				}
				msgs = append(msgs, m)
			default:
				break fill
			}
		}
		err := pr.SendMessages(msgs)
		f.mu.Lock()
		if err != nil {
			// Some of them may be written all the same: the truth is
			// read back from the topic (checkExact).
			f.nFailed++
		} else {
			f.acked[p] = append(f.acked[p], time.Now())
			for _, m := range msgs {
				r := m.Metadata.(testkit.Movie)
				t := f.truth[r.MovieID]
				t.MovieID = r.MovieID
				t.Count++
				f.sums[r.MovieID] += r.Rating
				t.Rating = f.sums[r.MovieID] / float64(t.Count)
				f.truth[r.MovieID] = t
			}
		}
		f.mu.Unlock()
		f.queued.Add(-int64(len(msgs)))
	}
}

// inputGap returns the longest gap between acknowledged sends to input
// partition p that overlaps (from, ended], and the acknowledgement that
// ended it (zero while none has): input that did not arrive stalls the
// outputs of its partition (the feed partitions by movie as the engine
// does, so input partition p feeds output partition p), which is the
// feed's stall, not keepstate's.
func (f *ratingFeed) inputGap(p int, from, ended time.Time) (gap time.Duration, resumed time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p < 0 || p >= feedPartitions {
		return 0, time.Time{}
	}
	prev := from
	for _, at := range f.acked[p] {
		if !at.After(from) {
			prev = at
			continue
		}
		if g := at.Sub(prev); g > gap {
			gap, resumed = g, at
		}
		if at.After(ended) {
			return gap, resumed
		}
		prev = at
	}
	if g := time.Since(prev); g > gap {
		return g, time.Time{}
	}
	return gap, resumed
}

func (f *ratingFeed) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// pause stops generating ratings, waits (up to 2 minutes) until every
// one generated is acknowledged or failed, and returns a copy of the
// truth; resume sends again.
func (f *ratingFeed) pause() map[int64]testkit.Movie {
	f.mu.Lock()
	f.paused = true
	f.mu.Unlock()
	// The generator may be adding one tick's ratings: wait for a queue
	// that stays empty across more than one tick.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		if f.queued.Load() == 0 {
			time.Sleep(100 * time.Millisecond) // > one tick: no rating generated after paused was set
			if f.queued.Load() == 0 {
				break
			}
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.truth)
}

func (f *ratingFeed) resume() {
	f.mu.Lock()
	f.paused = false
	f.mu.Unlock()
	f.cond.Broadcast()
}

// failures returns how many sends failed.
func (f *ratingFeed) failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nFailed
}

// failed returns the error that ended the feed, if any.
func (f *ratingFeed) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// stop ends the feed and waits up to a minute for its last send.
func (f *ratingFeed) stop() {
	f.stopped.Do(func() {
		close(f.quit)
		f.resume()
		select {
		case <-f.done:
		case <-time.After(time.Minute):
		}
	})
}

// stallMonitor polls the read_committed end (last stable offset) of every
// partition of some topics every 100 ms and remembers when each advanced.
// It also asks the cluster for its brokers every 100 ms and remembers
// when an answer left one out: Kafka had fenced it (its failure
// detection).
type stallMonitor struct {
	mu       sync.Mutex
	advanced map[string][]time.Time // "topic/p" -> times it advanced
	last     map[string]int64
	fewer    []time.Time // answers that listed fewer brokers than the cluster has
}

func startStallMonitor(t *testing.T, brokers []string, topics []string, fences *fencedial.Dialer) *stallMonitor {
	m := &stallMonitor{advanced: map[string][]time.Time{}, last: map[string]int64{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { m.watchBrokers(ctx, brokers, fences) })
	// One poller per partition, each on a client of its own with short
	// timeouts: a poll held by a silent broker delays no other partition's.
	for _, topic := range topics {
		for p := int32(0); p < 3; p++ {
			wg.Go(func() { m.pollPartition(ctx, brokers, topic, p) })
		}
	}
	return m
}

// pollPartition observes the last stable offset of topic/p every 100 ms
// until ctx ends.
func (m *stallMonitor) pollPartition(ctx context.Context, brokers []string, topic string, p int32) {
	var client sarama.Client
	defer func() {
		if client != nil {
			_ = client.Close()
		}
	}()
	for ctx.Err() == nil {
		if client == nil {
			sc := sarama.NewConfig()
			sc.Version = sarama.V3_6_0_0
			sc.Net.DialTimeout, sc.Net.ReadTimeout = 500*time.Millisecond, 500*time.Millisecond
			sc.Metadata.Retry.Max = 0
			if c, err := sarama.NewClient(brokers, sc); err == nil {
				client = c
			}
		}
		if client != nil {
			if off, err := stableEnd(client, topic, p); err == nil {
				m.observe(fmt.Sprintf("%s/%d", topic, p), off)
			} else {
				_ = client.RefreshMetadata(topic)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stableEnd returns the last stable offset of topic/p.
func stableEnd(client sarama.Client, topic string, p int32) (int64, error) {
	b, err := client.Leader(topic, p)
	if err != nil {
		return 0, err
	}
	req := sarama.NewOffsetRequest(client.Config().Version)
	req.IsolationLevel = sarama.ReadCommitted
	req.AddBlock(topic, p, sarama.OffsetNewest, 1)
	resp, err := b.GetAvailableOffsets(req)
	if err != nil {
		_ = b.Close() // sarama keeps a connection whose read timed out dead until closed
		return 0, err
	}
	blk := resp.GetBlock(topic, p)
	if blk == nil {
		return 0, sarama.ErrIncompleteResponse
	}
	if !errors.Is(blk.Err, sarama.ErrNoError) {
		return 0, blk.Err
	}
	if blk.Offset != 0 || len(blk.Offsets) == 0 {
		return blk.Offset, nil
	}
	return blk.Offsets[0], nil
}

// watchBrokers asks every broker, each on its own connection and
// goroutine, for the cluster's brokers every 100 ms until ctx ends, and
// records each answer listing fewer than all: the first such answer is
// the earliest sign of Kafka's fence (a paused broker holds only its own
// poll, for the 500 ms read timeout, so it does not delay the others').
func (m *stallMonitor) watchBrokers(ctx context.Context, addrs []string, fences *fencedial.Dialer) {
	var wg sync.WaitGroup
	for _, addr := range addrs {
		wg.Go(func() { m.watchBroker(ctx, addr, addrs, fences) })
	}
	wg.Wait()
}

// watchBroker is watchBrokers' poll of the broker at addr, of a cluster
// of the brokers all; fences observes each answer.
func (m *stallMonitor) watchBroker(ctx context.Context, addr string, all []string, fences *fencedial.Dialer) {
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	sc.Net.DialTimeout, sc.Net.ReadTimeout = 500*time.Millisecond, 500*time.Millisecond
	b := sarama.NewBroker(addr)
	defer func() { _ = b.Close() }()
	for ctx.Err() == nil {
		_ = b.Open(sc)
		if resp, err := b.GetMetadata(sarama.NewMetadataRequest(sc.Version, []string{})); err != nil {
			_ = b.Close()
		} else {
			listed := make([]string, 0, len(resp.Brokers))
			for _, lb := range resp.Brokers {
				listed = append(listed, lb.Addr())
			}
			fences.Observe(addr, listed, time.Now())
			if len(resp.Brokers) < len(all) {
				m.mu.Lock()
				m.fewer = append(m.fewer, time.Now())
				m.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// fenceGap separates two fences in the monitor's answers (see
// fencedAfter): closer runs of answers leaving a broker out are one fence
// (a live broker whose metadata lags the others still lists the fenced
// one for a while); a rolling restart fences its brokers tens of seconds
// apart.
const fenceGap = 5 * time.Second

// fencedAfter returns how long after from Kafka fenced the broker whose
// loss the stall that ended at ended belongs to: the first answer of the
// last run of answers leaving a broker out (runs more than fenceGap apart
// are separate fences, as in a rolling restart) that began by ended, or
// the first run when none did.
func (m *stallMonitor) fencedAfter(from, until, ended time.Time) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var start, prev time.Time
	found := false
	for _, at := range m.fewer {
		if !at.After(from) || !at.Before(until) {
			continue
		}
		if !found || (at.Sub(prev) > fenceGap && !at.After(ended)) {
			start, found = at, true
		}
		prev = at
	}
	return start.Sub(from), found
}

// observe records key's last stable offset off. The first offset seen of
// a partition is its baseline, not an advance: the monitor's first answer
// can come after the group settled without any commit since, and counting
// it let the first fault start while the instances were still starting.
func (m *stallMonitor) observe(key string, off int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, ok := m.last[key]
	switch {
	case !ok:
		m.last[key] = off
		m.advanced[key] = []time.Time{}
		return
	case off <= prev:
		return
	}
	m.last[key] = off
	m.advanced[key] = append(m.advanced[key], time.Now())
}

// allAdvancedSince returns nil when every partition advanced after since.
func (m *stallMonitor) allAdvancedSince(since time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.advanced) < 6 {
		return fmt.Errorf("%d partitions seen", len(m.advanced))
	}
	for k, ts := range m.advanced {
		if len(ts) == 0 || ts[len(ts)-1].Before(since) {
			return fmt.Errorf("%s has not advanced since %v", k, since.Format("15:04:05.000"))
		}
	}
	return nil
}

// longestGap returns the longest time within [from, until] that one
// partition did not advance, which, and when that gap ended.
func (m *stallMonitor) longestGap(from, until time.Time) (time.Duration, string, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var worst time.Duration
	where, ended := "", until
	for k, ts := range m.advanced {
		prev := from
		for _, at := range ts {
			if at.Before(from) {
				continue
			}
			if at.After(until) {
				break
			}
			if g := at.Sub(prev); g > worst {
				worst, where, ended = g, k, at
			}
			prev = at
		}
		if g := until.Sub(prev); g > worst {
			worst, where, ended = g, k, until
		}
	}
	return worst, where, ended
}

// readyWatch samples the instances' /readyz every 200 ms and records how
// long each was not ready and the last reason it gave.
type readyWatch struct {
	quit chan struct{}
	done chan struct{}
	down map[string]time.Duration
	why  map[string]string
}

func startReadyWatch(inst []*crashInstance) *readyWatch {
	w := &readyWatch{quit: make(chan struct{}), done: make(chan struct{}), down: map[string]time.Duration{}, why: map[string]string{}}
	go func() {
		defer close(w.done)
		for {
			for _, in := range inst {
				code, reason, err := readyz(in.api)
				if err != nil || code != http.StatusOK {
					w.down[in.name] += 200 * time.Millisecond
					if err != nil {
						reason = err.Error()
					}
					if reason != "" {
						w.why[in.name] = reason
					}
				}
			}
			select {
			case <-w.quit:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

// readyz returns the status code of GET /readyz on api and the reason it
// gives when not ready.
func readyz(api string) (int, string, error) {
	resp, err := http.Get("http://" + api + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var body struct {
		Reason string `json:"reason"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Reason, err
}

// stop ends the watch and describes what it saw.
func (w *readyWatch) stop() string {
	close(w.quit)
	<-w.done
	var parts []string
	for _, name := range []string{"a", "b"} {
		s := fmt.Sprintf("/readyz of %s not 200 for ~%v", name, w.down[name])
		if w.why[name] != "" {
			s += fmt.Sprintf(" (last: %q)", w.why[name])
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
