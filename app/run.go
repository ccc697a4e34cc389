package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
	"github.com/keepstate/keepstate/redisstore"
	"github.com/keepstate/keepstate/web"
)

// ErrUnavailable wraps startup failures caused by a service keepstate needs
// (Kafka, Schema Registry, Redis) not answering. cmd exits with code 2.
var ErrUnavailable = errors.New("service unavailable")

// EngineConfig maps c onto the engine's configuration.
func (c Config) EngineConfig(log *slog.Logger) engine.Config {
	return engine.Config{
		Brokers: c.Brokers, ApplicationID: c.ApplicationID, InputTopic: c.InputTopic, OutputTopic: c.OutputTopic,
		CommitInterval: c.CommitInterval, IdleFlush: c.IdleFlush, BufferedRecords: c.BufferedRecords,
		CacheMaxDocs: cmp.Or(c.CacheMaxDocs, engine.DefaultConfig().CacheMaxDocs), InstanceID: c.InstanceID,
		CacheBudgetDocs: cacheBudgetDocs(c.CacheBudgetDocs, c.CacheMaxDocs, 0, 1), Partitions: c.Partitions,
		ReplicationFactor: c.ReplicationFactor, MinInsyncReplicas: c.MinInsyncReplicas, Logger: log,
		RepartitionTopic: c.ApplicationID + movies.RepartitionSuffix, AdvertiseAddr: c.AdvertiseAddr,
		ChangelogTopic: c.ApplicationID + movies.ChangelogSuffix, SessionTimeout: c.SessionTimeout,
		StaleDropAfter: c.StaleDropAfter, StandbyReplicas: c.StandbyReplicas, AcceptableLag: c.AcceptableLag,
		ProcessingGuarantee: engine.Guarantee(c.ProcessingGuarantee), TransactionTimeout: c.TransactionTimeout,
	}
}

// Store is a store the jobs run on: one table per job.
type Store interface {
	engine.Tables
	// Close releases the store; its tables are closed with it.
	Close() error
}

// OpenStore opens the store selected by c.Store, migrating a store of the
// older movie layout into the table movies.
func OpenStore(ctx context.Context, c Config, log *slog.Logger) (Store, error) {
	return openStore(ctx, c, log, 0)
}

// openStore is OpenStore; Go's memory limit goLimit (bytes, 0 for none)
// bounds the clover store's bulk load.
func openStore(ctx context.Context, c Config, log *slog.Logger, goLimit int64) (Store, error) {
	switch c.Store {
	case StoreClover:
		s, err := docstore.Open(c.DataDir, docstore.WithFsync(c.Fsync), docstore.WithLogger(log),
			docstore.WithCacheSize(c.StoreCacheMiB<<20), docstore.WithWriteCache(c.StoreWriteCache),
			docstore.WithDiskReserve(c.StoreDiskReserveMiB<<20), docstore.WithBulkMemory(bulkMemory(goLimit, c.StoreCacheMiB<<20)),
			docstore.WithRebuildCorrupt(c.OnStoreCorrupt == CorruptRebuild))
		if err != nil {
			return nil, fmt.Errorf("open clover store in %s: %w", c.DataDir, err)
		}
		return s, nil
	case StoreRedis:
		redisstore.RouteClientLogs(log)
		s, err := redisstore.Open(ctx, c.RedisURL, redisstore.WithMode(redisstore.Mode(c.RedisMode)),
			redisstore.WithPrefix(c.ApplicationID+":"), redisstore.WithLogger(log),
			redisstore.WithTableStream(movies.Name, redisstore.TableStream{Key: movies.StreamKey, MaxLen: c.RedisStreamLen, Fields: movies.StreamFields}))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("%w: unknown store %q", ErrConfig, c.Store)
}

// OpenRegistry connects to the Schema Registry and checks it answers. The
// credentials come from --schema-registry-user and the password options
// (or the URL's userinfo); no error shows them.
func OpenRegistry(ctx context.Context, c Config, log *slog.Logger) (*avro.Registry, error) {
	sec, err := c.ReadSecrets()
	if err != nil {
		return nil, err
	}
	opts := []avro.Option{avro.WithLogger(log)}
	if c.SchemaRegistryUser != "" {
		opts = append(opts, avro.WithBasicAuth(c.SchemaRegistryUser, sec.RegistryPassword))
	}
	reg, err := avro.NewRegistry(c.SchemaRegistry, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: --schema-registry: %w", ErrConfig, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := reg.Ping(pctx); err != nil {
		// err names the registry (without credentials) once.
		return nil, fmt.Errorf("%w: %w; start one or set --schema-registry (try `keepstate demo`)", ErrUnavailable, err)
	}
	return reg, nil
}

// Run is `keepstate run`: RunJobs of the movie job. ready, if not nil,
// receives the API's listen address once it listens.
func Run(ctx context.Context, c Config, log *slog.Logger, ready func(addr string)) error {
	return RunJobs(ctx, c, log, ready, Movies())
}

// RunJobs serves the API and runs jobs in one process until ctx ends or
// one fails: one engine per job, sharing the store (a table per job), the
// HTTP server (GET /tables/{job}/...; the movie job also keeps /movies) and
// the peer routing. The movie job keeps the topics and group of c; the
// others use JobConfig. The Schema Registry is contacted only for the
// movie job. Under --on-store-corrupt=rebuild a corrupt clover store
// (engine.ErrCorrupt) stops the jobs and the API, is wiped, and they start
// again on the same address, restoring every table from its changelog (at
// most maxRebuilds times per process).
func RunJobs(ctx context.Context, c Config, log *slog.Logger, ready func(addr string), jobs ...Job) error {
	if err := cmp.Or(c.Validate(), checkJobs(jobs)); err != nil {
		return err
	}
	log = discardLogger(log)
	goLimit, plan, err := applyMemoryLimit(c, log)
	if err != nil {
		return err
	}
	autoBudget := c.CacheBudgetDocs == 0 && c.CacheMaxDocs == 0
	if c.CacheBudgetDocs == 0 {
		// 0 is none (-1): --cache-max-docs alone bounds each partition.
		c.CacheBudgetDocs = cmp.Or(cacheBudgetDocs(0, c.CacheMaxDocs, goLimit, len(jobs)), -1)
		if goLimit > 0 && c.CacheBudgetDocs > 0 {
			log.Info("cache budget sized to the memory limit", "cache_budget_docs", c.CacheBudgetDocs, "jobs", len(jobs), "go_mib", goLimit>>20)
		}
	}
	var gov *memoryGovernor
	if plan.totalMiB > 0 {
		gov = &memoryGovernor{plan: plan, live: liveHeap, autoBudget: autoBudget, budget: c.CacheBudgetDocs, log: log}
	}
	sec, err := c.ReadSecrets()
	if err != nil {
		return err
	}
	var reg *avro.Registry
	if slices.ContainsFunc(jobs, func(j Job) bool { return j.movies }) {
		if reg, err = OpenRegistry(ctx, c, log); err != nil {
			return err
		}
	}
	if c.PprofAddr != "" {
		if _, err := servePprof(ctx, c.PprofAddr, log); err != nil {
			return err
		}
	}
	httpAddr := c.HTTPAddr
	for rebuilds := 0; ; rebuilds++ {
		var bound string
		err = serveJobs(ctx, c, log, httpAddr, goLimit, gov, reg, sec, jobs, func(addr string) {
			bound = addr
			if ready != nil {
				ready(addr)
				ready = nil
			}
		})
		corrupt := errors.Is(err, engine.ErrCorrupt) && c.Store == StoreClover
		switch {
		case corrupt && c.OnStoreCorrupt == CorruptStop:
			return fmt.Errorf("%w; --on-store-corrupt=stop: the files are left in %s, and the next start refuses them until they are moved away or it runs with --on-store-corrupt=rebuild", err, c.DataDir)
		case !corrupt || bound == "" || ctx.Err() != nil:
			return err // bound == "": the store did not open (Open rebuilds on its own)
		}
		if rebuilds == maxRebuilds {
			return fmt.Errorf("%w (the store was rebuilt %d times by this process: is the disk failing?)", err, rebuilds)
		}
		log.Error("store corrupt: the jobs stopped; wiping the store and restoring it from the changelog", "err", err, "rebuild", rebuilds+1, "dir", c.DataDir)
		httpAddr = bound
	}
}

// maxRebuilds is how many times one process rebuilds a corrupt store
// (Config.OnStoreCorrupt) before it gives up: corruption that comes back
// at once is a failing disk, which a restore cannot fix.
const maxRebuilds = 3

// serveJobs opens the store, listens on httpAddr and serves the API and
// jobs until ctx ends or a job fails; listening runs once the API listens.
// A copy of gov, when not nil, governs these engines. It closes the store.
func serveJobs(ctx context.Context, c Config, log *slog.Logger, httpAddr string, goLimit int64, gov *memoryGovernor,
	reg *avro.Registry, sec Secrets, jobs []Job, listening func(addr string)) error {
	store, err := openStore(ctx, c, log, goLimit)
	if err != nil {
		return err
	}
	defer store.Close()
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return fmt.Errorf("listen on --http-addr %s: %w", httpAddr, err)
	}
	advertise := cmp.Or(c.AdvertiseAddr, advertiseAddr(ln.Addr()))
	opts := web.Options{Logger: log, PeerSecret: sec.PeerSecret}
	var engines engineSet
	var names []string
	for _, j := range jobs {
		eng, err := j.start(ctx, c, store, reg, advertise, log, &opts)
		if err != nil {
			ln.Close()
			return err
		}
		engines, names = append(engines, eng), append(names, j.name())
	}
	opts.Stats, opts.Roles = engines.stats, engines.roles
	if c.Store == StoreClover && len(sec.PeerSecret) == 0 {
		log.Warn("no --peer-secret: queries for partitions of other instances answer 503 and range queries only cover this instance; give every instance the same --peer-secret or --peer-secret-file")
	}
	// The API outlives the jobs on the way out: while a stopping instance
	// hands its partitions over, its peers still reach it (a 503 for what
	// it no longer runs, its standby copies for theirs) instead of a
	// refused connection; /readyz says it is stopping.
	stopping, ready := ctx.Done(), engines.ready
	opts.Ready = func() error {
		select {
		case <-stopping:
			return errors.New("stopping: handing its partitions over")
		default:
			return ready()
		}
	}
	srv := web.New(opts)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	webCtx, stopWeb := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWeb()
	webErr := make(chan error, 1)
	go func() { webErr <- srv.Serve(webCtx, ln) }()
	ds, _ := store.(*docstore.Store)
	var governing sync.WaitGroup
	defer func() { cancel(); governing.Wait() }()
	if gov != nil {
		g := *gov
		for _, e := range engines {
			g.engines = append(g.engines, e)
		}
		governing.Go(func() {
			g.run(ctx)
			gov.plan = g.plan // a raised target outlives a rebuild of the store
		})
	}
	log.Info("keepstate running", "api", "http://"+DisplayAddr(ln.Addr().String()), "advertise", advertise, "store", c.Store,
		"brokers", strings.Join(c.Brokers, ","), "application_id", c.ApplicationID, "jobs", strings.Join(names, ","))
	listening(ln.Addr().String())
	if ds != nil {
		// A store condemned by a query or a compaction stops the jobs
		// too, even when they are idle and would not call it.
		go func() {
			select {
			case <-ds.Condemned():
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	err = runEngines(ctx, engines)
	cancel()
	stopWeb()
	if ds != nil && ds.CondemnedErr() != nil && !errors.Is(err, engine.ErrCorrupt) {
		// The watcher stopped the jobs (they end with nil or with
		// whatever canceling interrupted): the store is why.
		cause := fmt.Errorf("store: %w", ds.CondemnedErr())
		if err != nil {
			cause = fmt.Errorf("%w (the jobs stopped with: %v)", cause, err)
		}
		err = cause
	}
	if werr := <-webErr; err == nil && werr != nil && !errors.Is(werr, context.Canceled) {
		err = werr
	}
	if errors.Is(err, engine.ErrKafkaUnavailable) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// DisplayAddr renders a listen address for humans (":7001" →
// "localhost:7001"), as keepstate logs it.
func DisplayAddr(addr string) string {
	return withHost(addr, func() (string, error) { return "localhost", nil })
}

// advertiseAddr is the default address other instances use to reach this
// one: the listen address, with the hostname for an unspecified host.
func advertiseAddr(a net.Addr) string { return withHost(a.String(), os.Hostname) }

// withHost replaces an empty or unspecified host of addr by what host
// returns, unless that fails.
func withHost(addr string, host func() (string, error)) string {
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		if name, err := host(); err == nil {
			h = name
		}
	}
	return net.JoinHostPort(h, port)
}
