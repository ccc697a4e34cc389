package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// ErrKafkaUnavailable means the Kafka brokers could not be reached.
var ErrKafkaUnavailable = errors.New("kafka unavailable")

// ErrInstanceFenced means another live instance joined the group with the
// same static instance id; this one must stop.
var ErrInstanceFenced = errors.New("another instance with the same --instance-id joined the group")

// Engine runs the rekey and aggregate stages of one application instance.
// Create it with New and call Run once; Stats, Ready and Partitions may be
// called concurrently from any goroutine.
type Engine struct {
	cfg    Config
	topics Topics
	table  Table  // the job's state
	job    Runner // the aggregation
	// localStore is set when the table is InstanceLocal (see persist).
	localStore bool
	log        *slog.Logger

	c counters
	// setups counts the group sessions that began (Setup ran), so that
	// Run tells a session that ended from a join that never got one.
	setups atomic.Int64
	route  *Router
	budget atomic.Int64 // the cache budget (Config.CacheBudgetDocs, then SetCacheBudget)

	kafka    saramaKafka
	watch    *brokerWatch // dials every client's connections (brokerwatch.go)
	client   sarama.Client
	clog     changelogLog // reads the changelog for restores, over client
	producer sarama.SyncProducer
	nParts   int32 // repartition/changelog partitions
	nOut     int32 // output topic partitions
	nDLQ     int32

	mu            sync.Mutex
	cancelSession context.CancelFunc
	fatal         error // the first task error that stops Run (ErrCorrupt); guarded by mu

	stale  staleDropper
	asg    *assignor
	parked parking // tasks kept across a rebalance (park.go)
	// parkedRekey are the rekey stages' producers kept likewise.
	parkedRekey parking
	standby     standbySet   // the partitions tailed here as replicas
	copies      copies       // the checkpoint of each partition the store holds
	meters      replayMeters // the records replayed into each
	// actives and inputs are the aggregate and input partitions run here
	// in the last session, of generation activesGen; guarded by mu.
	actives, inputs []int32
	activesGen      int32
}

// NewJob checks cfg and returns an engine that runs job (see Job.Runner)
// with its state in table (opened with job.Spec(), see Tables). Its
// output records, if the job has any, go to cfg.OutputTopic. It does not
// connect to anything; Run does.
func NewJob(cfg Config, table Table, job Runner) (*Engine, error) {
	if table == nil || job == nil {
		return nil, fmt.Errorf("engine: table and job are required: %w", ErrInvalid)
	}
	if job.HasOutput() && cfg.OutputTopic == "" {
		return nil, fmt.Errorf("engine: job %s writes output records but no output topic is set: %w", job.Spec().Name, ErrInvalid)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.logger().With("job", job.Spec().Name)
	l, ok := table.(InstanceLocal)
	e := &Engine{cfg: cfg, topics: cfg.Topics(), table: table, job: job, log: log, kafka: saramaKafka{brokers: cfg.Brokers},
		localStore: ok && l.InstanceLocal(), route: newRouter(cfg, log)}
	tp := e.topics
	// The watch follows the leaders of the engine's topics and of the
	// internal ones that place the group's and transactions' coordinators.
	e.watch = newBrokerWatch(cfg.Brokers, NewSaramaConfig(cfg.ApplicationID),
		tp.Input, tp.Repartition, tp.Changelog, tp.Output, tp.DLQ, "__consumer_offsets", "__transaction_state")
	e.kafka.watch, e.kafka.group = e.watch, cfg.ApplicationID
	e.budget.Store(int64(cfg.CacheBudgetDocs))
	e.asg = &assignor{e: e}
	e.standby.wake = make(chan struct{}, 1)
	return e, nil
}

// Job returns the job the engine runs.
func (e *Engine) Job() Runner { return e.job }

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats { return e.c.snapshot() }

// Topics returns the topic names the engine uses.
func (e *Engine) Topics() Topics { return e.topics }

// saramaConfig is the client configuration shared by consumer and producer:
// idempotent producer with acks=all and one request in flight, manual
// offset commits, read_committed, static membership with an instance id.
func (e *Engine) saramaConfig() *sarama.Config {
	sc := NewSaramaConfig(e.cfg.ApplicationID)
	if e.watch != nil {
		sc.Net.Proxy.Enable, sc.Net.Proxy.Dialer = true, e.watch
	}
	sc.Metadata.Retry.Max, sc.Metadata.Retry.Backoff = 2, 200*time.Millisecond
	sc.Producer.Idempotent, sc.Producer.RequiredAcks = true, sarama.WaitForAll
	sc.Producer.Return.Successes = true
	// Retry a produce to a dead leader for 10 s: Kafka notices the loss
	// (broker.session.timeout.ms, 9 s) and elects a new leader by then.
	sc.Producer.Retry.Max, sc.Producer.Retry.Backoff = 50, 200*time.Millisecond
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	sc.Producer.Flush.Messages, sc.Producer.Flush.Frequency = 1000, 5*time.Millisecond
	sc.Net.MaxOpenRequests = 1
	sc.Producer.MaxMessageBytes = MaxRecordBytes
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.Offsets.AutoCommit.Enable, sc.Consumer.Offsets.Initial = false, sarama.OffsetOldest
	// Look a lost leader up again every 500 ms (sarama: 2 s), or 50 ms
	// just after the broker watch saw a fence or a leader move.
	sc.Consumer.Retry.Backoff = 500 * time.Millisecond
	sc.Consumer.Retry.BackoffFunc = e.watch.consumerBackoff(sc.Consumer.Retry.Backoff)
	sc.Consumer.Return.Errors = true
	sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{e.asg,
		rangeStrategy{BalanceStrategy: sarama.NewBalanceStrategyRange(), addr: e.cfg.AdvertiseAddr}}
	sc.Consumer.Group.InstanceId = e.cfg.InstanceID
	// A member whose SyncGroup meets a new rebalance joins again after
	// Rebalance.Retry.Backoff while the whole group waits: 200 ms, not
	// sarama's 2 s, with retries for sarama's 8 s budget.
	sc.Consumer.Group.Rebalance.Retry.Backoff, sc.Consumer.Group.Rebalance.Retry.Max = 200*time.Millisecond, 40
	sc.Consumer.Group.Session.Timeout = e.cfg.SessionTimeout
	sc.Consumer.Group.Heartbeat.Interval = e.heartbeatInterval()
	sc.Consumer.Group.Member.UserData = []byte(e.cfg.AdvertiseAddr)
	// sarama's default (256) caps each drained batch near 256 records, so
	// per-batch costs (a produce round trip, a transaction, a store read)
	// dominate; see Config.BufferedRecords and docs/benchmarks.md.
	sc.ChannelBufferSize = e.cfg.BufferedRecords
	return sc
}

// connect opens the client, the admin and the producer, and creates the
// internal topics.
func (e *Engine) connect(ctx context.Context) error {
	client, err := e.kafka.NewClient(e.saramaConfig())
	if err != nil {
		return fmt.Errorf("%w: cannot reach brokers %s (%v); start Kafka or set --brokers (try `keepstate demo` for an in-process broker)",
			ErrKafkaUnavailable, strings.Join(e.cfg.Brokers, ","), err)
	}
	e.client = client
	e.clog = e.kafka.NewLog(client)
	admin, err := e.kafka.NewClusterAdmin(e.saramaConfig())
	if err != nil {
		return fmt.Errorf("%w: admin client: %v", ErrKafkaUnavailable, err)
	}
	e.route.setAdmin(admin)
	if err := e.ensureTopics(ctx, admin); err != nil {
		return err
	}
	if n := e.table.Spec().Partitions; n != 0 && n != e.nParts {
		return fmt.Errorf("engine: table %s was opened for %d partitions but %s has %d: %w",
			e.job.Spec().Name, n, e.topics.Repartition, e.nParts, ErrInvalid)
	}
	// The producer gets its own connections: on the group's, a produce
	// would queue behind a fetch held up to Consumer.MaxWaitTime (500 ms).
	pc := e.saramaConfig()
	producerTimeouts(pc)
	producer, err := e.kafka.NewSyncProducer(pc)
	if err != nil {
		return fmt.Errorf("engine: producer: %w", err)
	}
	e.producer = producer
	e.route.numParts.Store(e.nParts)
	return nil
}

// Run connects, creates the internal topics and processes until ctx is
// canceled or a fatal error occurs: the brokers unreachable at the start
// (ErrKafkaUnavailable), another instance with the same instance id
// (ErrInstanceFenced), or a corrupt store (ErrCorrupt, returned as soon as
// any task meets it). Other task errors restart the group session. It
// closes its Kafka clients before returning but not the store.
func (e *Engine) Run(ctx context.Context) error {
	defer goUntilStopped(ctx, func(ctx context.Context) {
		if e.watch != nil {
			e.watch.run(ctx, e.log)
		}
	})()
	if err := e.connect(ctx); err != nil {
		e.close()
		return err
	}
	defer e.close()
	if e.localStore {
		if err := e.loadCopies(ctx); err != nil {
			return fmt.Errorf("engine: read checkpoints: %w", err)
		}
	}
	defer e.stopReplicas()
	defer goUntilStopped(ctx, e.runStandbys)()
	gc := e.saramaConfig()
	if e.cfg.ProcessingGuarantee == ExactlyOnce {
		// An offset fetch is refused (UNSTABLE_OFFSET_COMMIT) while a
		// transaction holding the partition's offsets is open; let the
		// group client's retries outlast the transaction timeout, after
		// which the broker aborts a dead instance's transaction. The other
		// client keeps short retries, so a missing topic fails at once.
		gc.Metadata.Retry.Max = max(gc.Metadata.Retry.Max, int(2*e.cfg.TransactionTimeout/gc.Metadata.Retry.Backoff))
		e.abortPredecessor(ctx)
	}
	// sarama retries a heartbeat that failed on the connection
	// Metadata.Retry.Max times, each lasting Metadata.Retry.Backoff
	// (newSaramaGroup): outlast the session timeout, within which Kafka
	// elects a new coordinator and the group keeps its generation.
	gc.Metadata.Retry.Max = max(gc.Metadata.Retry.Max, int(e.cfg.SessionTimeout/gc.Metadata.Retry.Backoff))
	// A broker's answer is waited for the session timeout (at least 5 s),
	// not sarama's 30 s, which outlives the session: a silent broker then
	// holds a heartbeat or fetch only that long, and the client finds the
	// coordinator or leader Kafka elected meanwhile, keeping the
	// generation. A JoinGroup that times out is sent again as the same member.
	gc.Net.ReadTimeout = max(e.cfg.SessionTimeout, 5*time.Second)
	e.dropStaleMembership(ctx)
	group, err := e.kafka.NewConsumerGroup(e.cfg.ApplicationID, gc)
	if err != nil {
		return fmt.Errorf("engine: consumer group: %w", err)
	}
	defer e.leave() // after the group is closed: see leave.go
	defer group.Close()
	go func() {
		for err := range group.Errors() {
			e.log.Warn("consumer group error", "err", err)
		}
	}()
	h := &groupHandler{e: e}
	topics := []string{e.topics.Input, e.topics.Repartition}
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		sessCtx, cancel := context.WithCancel(ctx)
		e.mu.Lock()
		e.cancelSession = cancel
		e.mu.Unlock()
		setups := e.setups.Load()
		// A fence or leader move during the attempt ends the pause after
		// it (see brokerWatch.nextChange); each attempt takes a new channel.
		changed := e.watch.nextChange()
		err := group.Consume(sessCtx, topics, h)
		cancel()
		e.mu.Lock()
		fatal := e.fatal
		e.mu.Unlock()
		switch {
		case fatal != nil:
			return fmt.Errorf("engine: %w", fatal)
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, sarama.ErrFencedInstancedId):
			return fmt.Errorf("%w (--instance-id=%q): stop the other one or give each instance its own id", ErrInstanceFenced, e.cfg.InstanceID)
		case errors.Is(err, sarama.ErrInvalidSessionTimeout):
			// A setting no retry can fix: say so at once.
			return fmt.Errorf("engine: --session-timeout=%v is outside the range the brokers allow (group.min.session.timeout.ms to group.max.session.timeout.ms, 6s to 30m by default): %w",
				e.cfg.SessionTimeout, err)
		case err != nil:
			msg := "consumer group session ended"
			if e.setups.Load() == setups {
				// No session began: the join failed (coordinator failover,
				// Kafka unreachable). Not a restart loop, so /readyz does not
				// count it; the lapsed lease or restoring partitions show.
				msg = "could not join the consumer group"
			} else {
				e.route.restarts.note(err)
			}
			e.c.restarts.Add(1)
			e.log.Warn(msg, "err", err, "retry_in", backoff)
			if !sleepUntil(ctx, backoff, changed) {
				return nil
			}
		}
	}
	return nil
}

// rejoin ends the current group session so that the member joins the
// group again at once and the leader plans anew (a warm-up caught up). It
// is not a failure: it counts no restart.
func (e *Engine) rejoin(reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancelSession != nil {
		e.log.Info("rejoining the group", "reason", reason)
		e.c.rejoins.Add(1)
		e.endSessionLocked()
	}
}

// endSessionLocked cancels the current group session, if any; e.mu held.
func (e *Engine) endSessionLocked() {
	if e.cancelSession != nil {
		e.cancelSession()
		e.cancelSession = nil
	}
}

// startSession records the aggregate and input partitions of the session
// of generation gen and returns the aggregate partitions the last session
// ran here, if gen directly follows its generation: only then did nobody
// else run them in between, so the copies here are current.
func (e *Engine) startSession(gen int32, actives, inputs []int32) (was []int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.actives != nil && gen == e.activesGen+1 {
		was = e.actives
	}
	e.actives, e.inputs, e.activesGen = slices.Clone(actives), slices.Clone(inputs), gen
	return was
}

// lastSession returns the aggregate and input partitions run here in the
// last session.
func (e *Engine) lastSession() (actives, inputs []int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.actives), slices.Clone(e.inputs)
}

// restartSession ends the current group session so that the instance
// rejoins (a fatal task error, a fenced write); several failing tasks of
// one session count as one restart. ErrCorrupt instead stops Run with the
// error: rejoining would read the same damage.
func (e *Engine) restartSession(reason string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if errors.Is(err, ErrCorrupt) && e.fatal == nil {
		e.log.Error("store corrupt: stopping the job", "reason", reason, "err", err)
		e.fatal = err
		e.endSessionLocked()
		return
	}
	if e.cancelSession == nil {
		return // this session is already ending
	}
	e.log.Warn("restarting group session", "reason", reason, "err", err)
	e.route.restarts.note(err)
	e.c.restarts.Add(1)
	e.endSessionLocked()
}

func (e *Engine) close() {
	e.parked.release(nil, 0)
	e.parkedRekey.release(nil, 0)
	e.stale.stop()
	if admin := e.route.setAdmin(nil); admin != nil {
		_ = admin.Close()
	}
	if e.producer != nil {
		_ = e.producer.Close()
		e.producer = nil
	}
	if e.client != nil {
		_ = e.client.Close()
		e.client = nil
	}
}

// goUntilStopped runs fn in a goroutine on a context derived from ctx and
// returns the function that cancels that context and waits for fn to end.
func goUntilStopped(ctx context.Context, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// sleepCtx sleeps d or until ctx is done; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool { return sleepUntil(ctx, d, nil) }

// sleepUntil is sleepCtx, ended early when wake is closed (a nil wake
// never is).
func sleepUntil(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-wake:
	}
	return true
}
