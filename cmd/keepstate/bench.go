package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/app/bench"
	"github.com/keepstate/keepstate/internal/cli"
)

// cmdBench is `keepstate bench`: flags onto bench.Config, then bench.Run.
func cmdBench(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keepstate bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := bench.Default()
	b.Out = stdout
	logLevel := "warn"
	var zipf, uniform bool
	fs.StringVar(&b.Job, "job", b.Job, "job to drive: movies, or orders (the example job of examples/orders, whose binary --keepstate-bin names; each rating becomes an order of customer c-<movie>; phases fill, run and restore)")
	cli.BrokersFlag(fs, &b.Brokers)
	fs.StringVar(&b.SchemaRegistry, "schema-registry", "", "Schema Registry URL (default: an in-process one)")
	fs.Int64Var(&b.Movies, "movies", b.Movies, "distinct movies (the fill phase rates each once)")
	fs.Int64Var(&b.Ratings, "ratings", b.Ratings, "ratings of the run phase")
	fs.IntVar(&b.Queries, "queries", b.Queries, "requests of the query phase (one in 20 a range query, the others key lookups)")
	fs.BoolVar(&zipf, "zipf", false, "run phase: Zipf-skewed movie popularity (the default)")
	fs.BoolVar(&uniform, "uniform", false, "run phase: every movie equally likely")
	fs.StringVar(&b.Store, "store", b.Store, "state store of the child: clover or redis")
	fs.StringVar(&b.RedisURL, "redis-url", b.RedisURL, "Redis URL with --store redis")
	fs.StringVar(&b.RedisMode, "redis-mode", b.RedisMode, "how --redis-url is read: single, cluster or sentinel")
	phases := fs.String("phases", strings.Join(b.Phases, ","), "phases to run, in order: fill,run,query,restart,restore")
	fs.Func("partitions", "partitions of the input topic (default 3)", func(s string) error {
		_, err := fmt.Sscan(s, &b.Partitions)
		return err
	})
	fs.Uint64Var(&b.Seed, "seed", b.Seed, "random seed of the workload")
	fs.StringVar(&b.Binary, "keepstate-bin", "", "keepstate binary the child runs (default: this one)")
	fs.StringVar(&b.WorkDir, "work-dir", "", "scratch directory, kept afterwards (default: a temporary one, removed)")
	fs.BoolVar(&b.Keep, "keep", false, "keep the temporary scratch directory (child log and store)")
	fs.Func("child-arg", "extra flag for the child's `keepstate run`, repeatable (e.g. --child-arg=--commit-interval=200ms)", func(s string) error {
		b.ChildArgs = append(b.ChildArgs, s)
		return nil
	})
	fs.StringVar(&b.CPUProfile, "cpuprofile", "", "write a CPU profile of the child's run phase (or --cpuprofile-phase) here (skipped with a warning if the child serves no /debug/pprof)")
	fs.StringVar(&b.ProfilePhase, "cpuprofile-phase", "", "phase to profile: run (default) or restore")
	fs.DurationVar(&b.ProfileFor, "cpuprofile-duration", b.ProfileFor, "length of that profile, from the child's start")
	fs.StringVar(&b.ProfileURL, "cpuprofile-url", "", "base URL where the child serves /debug/pprof (default: its API address)")
	fs.IntVar(&b.Instances, "instances", b.Instances, "keepstate children run as one group (2 or more: clover, phases fill, run and query; e.g. the cost of --child-arg=--standby-replicas=1)")
	fs.DurationVar(&b.Timeout, "timeout", b.Timeout, "give up on a phase after this long")
	fs.BoolVar(&b.JSON, "json", false, "print the result as JSON")
	fs.StringVar(&logLevel, "log-level", logLevel, "debug, info, warn or error (progress is logged at info)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if zipf && uniform {
		return fmt.Errorf("%w: --zipf and --uniform exclude each other", app.ErrConfig)
	}
	if uniform {
		b.Dist = bench.DistUniform
	}
	b.Phases = cli.SplitList(*phases)
	if b.Binary == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find this binary: %w", err)
		}
		b.Binary = self
	}
	log, err := app.NewLogger(stderr, logLevel)
	if err != nil {
		return fmt.Errorf("%w: --log-level: %w", app.ErrConfig, err)
	}
	_, err = bench.Run(ctx, b, log)
	return err
}
