// Package bench is `keepstate bench`, an end-to-end benchmark of keepstate
// run as a child process, and the pieces compare/ reuses (workload, truth
// and check, drain watch, child process, CPU profile). It lives outside
// package app because it runs in-process fakes (kfake, demo.Registry)
// when given no --brokers and --schema-registry.
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/app/demo"
	"github.com/keepstate/keepstate/redisstore"
)

// Phases of `keepstate bench`, run in this order.
const (
	PhaseFill    = "fill"    // Movies distinct movies, one rating each
	PhaseRun     = "run"     // Ratings ratings over Movies movies (Dist)
	PhaseQuery   = "query"   // key lookups (each checked exact) and range queries, latency p50/p99
	PhaseRestart = "restart" // kill -9, restart, time to the first exact answer
	PhaseRestore = "restore" // store deleted, time to a full restore from the changelog
)

var benchPhases = []string{PhaseFill, PhaseRun, PhaseQuery, PhaseRestart, PhaseRestore}

// ErrNotExact is returned by Run when a phase ended with a state that is
// not exactly the ratings produced.
var ErrNotExact = errors.New("benchmark state is not exact")

// Config configures `keepstate bench`: an end-to-end benchmark of
// keepstate run as a child process. Start from Default().
type Config struct {
	Job            string        // --job: JobMovies or JobOrders
	Brokers        []string      // --brokers: a running Kafka (empty: an in-process kfake broker)
	SchemaRegistry string        // --schema-registry (empty: an in-process registry)
	Movies         int64         // --movies: distinct movies
	Ratings        int64         // --ratings: ratings of the run phase
	Queries        int           // --queries: requests of the query phase
	Dist           string        // --zipf / --uniform: DistZipf or DistUniform
	Store          string        // --store: clover or redis
	RedisURL       string        // --redis-url
	RedisMode      string        // --redis-mode: single, cluster or sentinel (how RedisURL is read)
	Phases         []string      // --phases: subset of fill,run,query,restart,restore
	Partitions     int32         // --partitions of the input topic
	Seed           uint64        // --seed of the workload
	Binary         string        // keepstate binary started as `keepstate run`
	WorkDir        string        // --work-dir: scratch directory (empty: a temporary one)
	Keep           bool          // --keep: keep the scratch directory (child log, store)
	ChildArgs      []string      // --child-arg: extra `keepstate run` flags
	CPUProfile     string        // --cpuprofile: write a CPU profile of the child during ProfilePhase here
	ProfileFor     time.Duration // --cpuprofile-duration: its length
	ProfilePhase   string        // --cpuprofile-phase: run or restore (empty: run)
	ProfileURL     string        // --cpuprofile-url: where the child serves /debug/pprof (empty: its API)
	// Instances is how many keepstate children run as one group
	// (--instances): 2 or more measure the group (its CPU summed, each
	// one's RSS and store size in the note).
	Instances int
	Timeout   time.Duration // --timeout of each phase
	JSON      bool          // --json: print the result as JSON instead of a table
	Out       io.Writer     // where the table or JSON goes
}

// Default returns the bench defaults: 62k movies, 1M Zipf ratings,
// clover, every phase, in-process broker; about a minute on 2 cores.
func Default() Config {
	return Config{Job: JobMovies, Movies: 62000, Ratings: 1000000, Queries: 40000, Dist: DistZipf, Store: app.StoreClover,
		RedisURL: app.Default().RedisURL, RedisMode: app.Default().RedisMode, Phases: slices.Clone(benchPhases), Partitions: 3, Seed: 1, Instances: 1,
		ProfileFor: 10 * time.Second, Timeout: 10 * time.Minute, Out: io.Discard}
}

// Validate checks the bench settings.
func (b Config) Validate() error {
	var errs []error
	bad := func(failed bool, err error) {
		if failed {
			errs = append(errs, err)
		}
	}
	has := func(phases ...string) bool {
		return slices.ContainsFunc(b.Phases, func(p string) bool { return slices.Contains(phases, p) })
	}
	bad(b.Dist != DistZipf && b.Dist != DistUniform,
		fmt.Errorf("distribution %q: want %s or %s", b.Dist, DistZipf, DistUniform))
	bad(b.Movies < 2 || b.Ratings < 1 || b.Partitions < 1 || b.Queries < 4,
		errors.New("--movies >= 2, --ratings >= 1, --queries >= 4 and --partitions >= 1 are required"))
	bad(b.Store != app.StoreClover && b.Store != app.StoreRedis,
		fmt.Errorf("--store: unknown store %q", b.Store))
	_, err := redisstore.ParseMode(b.RedisMode)
	bad(err != nil && b.RedisMode != "",
		fmt.Errorf("--redis-mode: unknown mode %q (want single, cluster or sentinel)", b.RedisMode))
	bad(len(b.Phases) == 0, errors.New("--phases: at least one phase"))
	bad(b.Instances < 1 || b.Instances > 1 && (b.Store != app.StoreClover || has(PhaseRestart, PhaseRestore)),
		fmt.Errorf("--instances %d: want 1, or more with the clover store and phases fill, run and query",
			b.Instances))
	bad(b.Job != JobMovies && (b.Job != JobOrders || b.Store != app.StoreClover || has(PhaseQuery, PhaseRestart)),
		fmt.Errorf("--job %q: want %s, or %s with the clover store and phases fill, run and restore",
			b.Job, JobMovies, JobOrders))
	last, order := -1, strings.Join(benchPhases, ",")
	for _, p := range b.Phases {
		i := slices.Index(benchPhases, p)
		bad(i < 0, fmt.Errorf("--phases: unknown phase %q (want %s)", p, order))
		bad(i >= 0 && i <= last, fmt.Errorf("--phases: %q out of order or repeated (order: %s)", p, order))
		if i >= 0 {
			last = i
		}
	}
	bad(len(b.Phases) > 0 && !has(PhaseFill, PhaseRun),
		errors.New("--phases: query, restart and restore need fill or run before them"))
	bad(b.ProfilePhase != "" && b.ProfilePhase != PhaseRun && b.ProfilePhase != PhaseRestore,
		fmt.Errorf("--cpuprofile-phase %q: want %s or %s", b.ProfilePhase, PhaseRun, PhaseRestore))
	bad(b.Binary == "" || b.Timeout <= 0 || b.ProfileFor <= 0,
		errors.New("a keepstate binary, a positive --timeout and --cpuprofile-seconds are required"))
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", app.ErrConfig, errors.Join(errs...))
	}
	return nil
}

// PhaseResult is one measured phase.
type PhaseResult struct {
	Phase      string      `json:"phase"`
	Records    int64       `json:"records"` // ratings processed, or changelog records restored
	Seconds    float64     `json:"seconds"` // from the child's start
	Rate       float64     `json:"rate"`    // Records / Seconds (0 for restart)
	Unit       string      `json:"unit"`
	CPUSeconds float64     `json:"cpuSeconds"` // the child's CPU time at that moment
	PeakRSSMiB float64     `json:"peakRssMiB"`
	Check      CheckReport `json:"check"`
	Note       string      `json:"note,omitempty"`
	// Lookup and Range are the query phase's latencies.
	Lookup *Latency `json:"lookup,omitempty"`
	Range  *Latency `json:"range,omitempty"`
}

// Result is the whole benchmark's outcome.
type Result struct {
	Date       string        `json:"date"`
	Broker     string        `json:"broker"`
	Store      string        `json:"store"`
	Workload   string        `json:"workload"`
	Partitions int32         `json:"partitions"`
	Machine    string        `json:"machine"`
	Phases     []PhaseResult `json:"phases"`
}

// bench is the state of one Run.
type bench struct {
	cfg      Config
	log      *slog.Logger
	work     string
	brokers  []string
	registry string
	appID    string
	api      string // http://host:port of the child
	httpAddr string
	truth    *Truth
	child    *Child
	// peers are the children after the first (Config.Instances), with
	// their HTTP addresses; child is the one asked and checked.
	peers     []*Child
	peerAddrs []string
	encode    ProduceOptions
}

// Run is `keepstate bench`: for each phase it produces the ratings, times
// keepstate as a child process, checks every movie, and prints a table (or
// JSON) to cfg.Out; then ErrNotExact when a check failed.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (Result, error) {
	var res Result
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	b := &bench{cfg: cfg, log: cmp.Or(log, slog.New(slog.DiscardHandler)), truth: NewTruth()}
	var err error
	if b.work = cfg.WorkDir; b.work == "" {
		if b.work, err = os.MkdirTemp("", "keepstate-bench-"); err != nil {
			return res, err
		}
	} else if err := os.MkdirAll(b.work, 0o755); err != nil {
		return res, err
	}
	if cfg.Keep || cfg.WorkDir != "" {
		b.log.Info("bench scratch directory", "dir", b.work)
	} else {
		defer os.RemoveAll(b.work)
	}
	res.Broker = "kafka at " + strings.Join(cfg.Brokers, ",")
	b.brokers = cfg.Brokers
	if len(b.brokers) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(int(cfg.Partitions)))
		if err != nil {
			return res, fmt.Errorf("bench: start in-process Kafka: %w", err)
		}
		defer cluster.Close()
		b.brokers = cluster.ListenAddrs()
		res.Broker = "in-process kfake"
	}
	if b.registry = cfg.SchemaRegistry; b.registry == "" {
		stop, url, err := serveBenchRegistry(filepath.Join(b.work, "registry.jsonl"), b.log)
		if err != nil {
			return res, err
		}
		defer stop()
		b.registry = url
	}
	reg, err := app.OpenRegistry(ctx, app.Config{SchemaRegistry: b.registry}, b.log)
	if err != nil {
		return res, err
	}
	b.appID = fmt.Sprintf("bench-%d", time.Now().UnixNano()%1e9)
	b.encode = ProduceOptions{Brokers: b.brokers, Topic: b.appID + "-ratings", Partitions: cfg.Partitions,
		Encode: RegistryEncoder(reg, b.appID+"-ratings-value")}
	if cfg.Job == JobOrders {
		b.encode.Encode = encodeOrder
	}
	addrs := make([]string, cfg.Instances) // the child's, then its peers'
	for i := range addrs {
		if addrs[i], err = FreeTCPAddr(); err != nil {
			return res, err
		}
	}
	b.httpAddr, b.api, b.peerAddrs = addrs[0], "http://"+addrs[0], addrs[1:]
	defer b.stopChild()

	res.Date = time.Now().UTC().Format(time.RFC3339)
	res.Store, res.Partitions = cfg.Store, cfg.Partitions
	res.Workload = fmt.Sprintf("%d ratings over %d movies, %s, job %s", cfg.Ratings, cfg.Movies, cfg.Dist, cfg.Job)
	if cfg.Instances > 1 {
		res.Workload += fmt.Sprintf(", %d instances", cfg.Instances)
	}
	res.Machine = fmt.Sprintf("%s/%s, %d cores, load %s, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), loadAvg(), runtime.Version())
	for _, phase := range cfg.Phases {
		pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		var pr PhaseResult
		b.log.Info("bench phase started", "phase", phase)
		switch phase {
		case PhaseFill:
			pr, err = b.process(pctx, PhaseFill, Workload{Dist: DistFill, Movies: cfg.Movies, Seed: cfg.Seed + 1000})
		case PhaseRun:
			pr, err = b.process(pctx, PhaseRun, Workload{Dist: cfg.Dist, Movies: cfg.Movies, Ratings: cfg.Ratings, Seed: cfg.Seed})
		case PhaseQuery:
			pr, err = b.query(pctx)
		case PhaseRestart:
			pr, err = b.restart(pctx)
		case PhaseRestore:
			pr, err = b.restore(pctx)
		}
		cancel()
		if err != nil {
			return res, fmt.Errorf("bench %s: %w", phase, err)
		}
		b.log.Info("bench phase done", "phase", phase, "seconds", pr.Seconds, "rate", pr.Rate, "unit", pr.Unit, "check", pr.Check.String())
		res.Phases = append(res.Phases, pr)
	}
	if err := printBench(cfg.Out, res, cfg.JSON); err != nil {
		return res, err
	}
	for _, p := range res.Phases {
		if !p.Check.OK() {
			return res, fmt.Errorf("%w: phase %s: %s", ErrNotExact, p.Phase, p.Check)
		}
	}
	return res, nil
}

// process produces w with the child stopped, then starts the child and
// times it until every input and repartition offset is committed.
func (b *bench) process(ctx context.Context, phase string, w Workload) (PhaseResult, error) {
	pr := PhaseResult{Phase: phase, Records: w.Len(), Unit: "ratings/s"}
	if phase == PhaseFill {
		pr.Unit = "movies/s"
	}
	b.stopChild()
	took, err := ProduceWorkload(ctx, b.encode, w, b.truth)
	if err != nil {
		return pr, err
	}
	b.log.Info("bench produced", "phase", phase, "ratings", w.Len(), "took", took)
	if err := b.startChild(); err != nil {
		return pr, err
	}
	defer b.profileIn(ctx, phase)()
	watch := DrainWatch{Brokers: b.brokers, Group: b.appID,
		Stages: [][]string{{b.encode.Topic}, {b.appID + "-ratings-by-movie-repartition"}}}
	if b.cfg.Job == JobOrders {
		watch.Group = b.appID + "-" + ordersTable
		watch.Stages[1] = []string{watch.Group + "-repartition"}
	}
	drained, err := b.whileAlive(ctx, watch)
	if err != nil {
		return pr, err
	}
	err = b.measure(ctx, &pr, drained)
	return pr, err
}

// whileAlive waits until w is drained, failing early with the child's log
// when it exits.
func (b *bench) whileAlive(ctx context.Context, w DrainWatch) (time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var r DrainResult
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		r, err = w.Wait(ctx)
	}()
	select {
	case <-done:
		if err != nil {
			return r.At, b.child.Failed(err)
		}
		return r.At, nil
	case c := <-b.exited():
		cancel()
		<-done
		return time.Time{}, c.Failed(errors.New("keepstate exited during the phase"))
	}
}

// measure fills the phase's time from the child's start to at, CPU, RSS
// and rate, then checks every movie.
func (b *bench) measure(ctx context.Context, pr *PhaseResult, at time.Time) error {
	u, err := b.child.Usage()
	if err != nil {
		return err
	}
	pr.Seconds = at.Sub(b.child.Started).Seconds()
	pr.CPUSeconds = u.CPU.Seconds()
	pr.PeakRSSMiB = float64(u.PeakRSS) / (1 << 20)
	if len(b.peers) > 0 {
		note, err := b.groupUsage(pr)
		if err != nil {
			return err
		}
		pr.addNote(note)
	}
	if pr.Records > 0 {
		pr.Rate = float64(pr.Records) / pr.Seconds
	}
	var note string
	pr.Check, note = b.check(ctx, at)
	pr.addNote(note)
	return nil
}

// addNote appends note, if any, to the phase's note.
func (pr *PhaseResult) addNote(note string) {
	if note != "" {
		pr.Note = strings.TrimPrefix(pr.Note+"; "+note, "; ")
	}
}

// check reads every movie through the child's API until it is exact, or
// until a scan that began 30 s after the call still is not (a store may be
// written right after the offsets commit, and one scan of a million movies
// can take that long, so the last scan must begin after the deadline); the
// note says how long after at it became exact.
func (b *bench) check(ctx context.Context, at time.Time) (CheckReport, string) {
	deadline := time.Now().Add(30 * time.Second)
	scan := ScanAPI
	if b.cfg.Job == JobOrders {
		scan = ScanCustomers
	}
	for {
		scanned := time.Now()
		obs, err := scan(ctx, b.api)
		var r CheckReport
		if err == nil {
			r = b.truth.Check(obs)
			if r.OK() {
				if d := scanned.Sub(at); d > 100*time.Millisecond {
					return r, fmt.Sprintf("exact %.1f s after the commit", d.Seconds())
				}
				return r, ""
			}
		}
		if scanned.After(deadline) || ctx.Err() != nil {
			if err != nil {
				return CheckReport{Movies: b.truth.Movies()}, "check failed: " + err.Error()
			}
			return r, ""
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// profileIn starts a CPU profile of the child for ProfileFor when phase is
// the profiled one and returns a wait for it: the phase waits (after
// measuring) so that the child outlives the profile.
func (b *bench) profileIn(ctx context.Context, phase string) (wait func()) {
	if b.cfg.CPUProfile == "" || phase != cmp.Or(b.cfg.ProfilePhase, PhaseRun) {
		return func() {}
	}
	profiled := make(chan struct{})
	go func() {
		defer close(profiled)
		err := CollectCPUProfile(ctx, cmp.Or(b.cfg.ProfileURL, b.api), b.cfg.ProfileFor, b.cfg.CPUProfile)
		switch {
		case errors.Is(err, ErrNoProfiler):
			b.log.Warn("bench: no CPU profile: the child does not serve /debug/pprof there (enable it with --child-arg, point --cpuprofile-url at it)", "err", err)
		case err != nil:
			b.log.Warn("bench: CPU profile failed", "err", err)
		default:
			b.log.Info("bench: CPU profile written", "path", b.cfg.CPUProfile, "seconds", b.cfg.ProfileFor.Seconds())
		}
	}()
	return func() { <-profiled }
}

// FreeTCPAddr returns a 127.0.0.1 address whose port was free at the time
// of the call (for a child's API). Safe for concurrent use.
func FreeTCPAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// serveBenchRegistry serves an in-process Schema Registry on loopback.
func serveBenchRegistry(path string, log *slog.Logger) (func(), string, error) {
	reg, err := demo.NewRegistry(path, log)
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: reg, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, "http://" + ln.Addr().String(), nil
}

// loadAvg is the 1, 5 and 15 minute load average, or "?".
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// printBench writes res as a table, or as JSON.
func printBench(w io.Writer, res Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(w, "keepstate bench: %s, store %s, %s, %d partitions\n%s, %s\n\n",
		res.Workload, res.Store, res.Broker, res.Partitions, res.Machine, res.Date)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\trecords\tseconds\trate\tCPU s\tpeak RSS\tcheck\tnote")
	for _, p := range res.Phases {
		rate := "-"
		if p.Rate > 0 {
			rate = fmt.Sprintf("%.0f %s", p.Rate, p.Unit)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%s\t%.1f\t%.0f MiB\t%s\t%s\n",
			p.Phase, p.Records, p.Seconds, rate, p.CPUSeconds, p.PeakRSSMiB, p.Check, p.Note)
	}
	return tw.Flush()
}
