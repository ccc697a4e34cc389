// Command orders is keepstate's second example job, written on the job
// API (engine.Job) in a few lines (job.go): JSON order events are counted,
// summed and maxed per customer, the totals kept in the store (a table
// "customers" with an index on "total") and served at
// GET /tables/customers/{id} and GET /tables/customers?index=total&min=1000.
// See usage for its commands and docs/jobs.md. Against the broker of
// `go run ./cmd/keepstate demo`, from the repository root:
//
//	go run ./examples/orders
//	go run ./examples/orders produce --n 10000 --customers 500
//	curl localhost:7002/tables/customers/c-1
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/cli"
)

// defaultInputTopic is the topic the job reads and `orders produce` writes.
const defaultInputTopic = "orders"

const usage = `orders — keepstate's example job: order totals per customer.

Usage:
  orders [run] [flags]    run the job: orders in, totals per customer in the store,
                          GET /tables/customers/{id} and /tables/customers?index=total&min=...
  orders produce [flags]  send generated orders (or JSON lines from stdin with --stdin)
  orders reset [flags]    wipe the job's table: the next start rebuilds it from the changelog;
                          --reprocess also deletes the job's internal topics and offsets
                          (recompute from the earliest orders). Stop every instance first.

Run "orders <command> -h" for the flags of a command. Every flag has an
environment variable KEEPSTATE_<FLAG> with dashes as underscores. See
docs/jobs.md.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process exit code, as
// keepstate does: 0 ok, 1 failure, 2 bad usage or a service that is not
// reachable.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd, rest := "run", args
	if len(args) > 0 && (args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, rest = args[0], args[1:]
	}
	commands := map[string]func(context.Context, []string, io.Reader, io.Writer, io.Writer) error{
		"run": cmdRun, "produce": cmdProduce, "reset": cmdReset,
	}
	if commands[cmd] == nil {
		fmt.Fprintf(stderr, "orders: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	return cli.ExitCode(stderr, "orders", cmd, commands[cmd](ctx, rest, stdin, stdout, stderr))
}

// defaultConfig is app.Default with the example's topics, API address and
// data directory, so that the example runs next to `keepstate demo` (API
// on :7001, store in ./data/store).
func defaultConfig() app.Config {
	c := app.Default()
	c.InputTopic, c.OutputTopic = defaultInputTopic, "customer-totals"
	c.HTTPAddr, c.DataDir = ":7002", "./data/orders"
	return c
}

func cmdRun(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	cfg, log, job, err := jobFlags("orders run", args, stderr, nil)
	if err != nil {
		return err
	}
	return app.RunJobs(ctx, cfg, log, func(addr string) {
		fmt.Fprintf(stdout, "orders job running: %s -> table %s -> %s\n  API: http://%s  (try /tables/customers/c-1 and /tables/customers?index=total&min=1000)\n",
			cfg.InputTopic, CustomersTable, cfg.OutputTopic, app.DisplayAddr(addr))
	}, job)
}

// jobFlags parses args with the flags of `orders run`: those of
// `keepstate run`, the topic flags describing this job's topics (and those
// extra registers). It returns the configuration, its logger and the job.
func jobFlags(name string, args []string, stderr io.Writer, extra func(fs *flag.FlagSet)) (app.Config, *slog.Logger, app.Job, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := defaultConfig()
	cli.CommonFlags(fs, &cfg)
	fs.Lookup("input-topic").Usage = `topic of JSON orders {"order_id":"o-1","customer_id":"c-42","amount":12.5}`
	fs.Lookup("output-topic").Usage = `topic of each customer's new totals (key: customer id, value: {"count":..,"total":..,"max":..})`
	fs.Lookup("schema-registry").Usage = "Schema Registry URL (unused: this job reads JSON)"
	if extra != nil {
		extra(fs)
	}
	if err := cli.Parse(fs, args); err != nil {
		return cfg, nil, app.Job{}, err
	}
	log, err := app.NewLogger(stderr, cfg.LogLevel)
	if err != nil {
		return cfg, nil, app.Job{}, fmt.Errorf("%w: --log-level: %w", app.ErrConfig, err)
	}
	job, err := app.NewJob(CustomersJob(), cfg.InputTopic, cfg.OutputTopic)
	return cfg, log, job, err
}

// cmdReset is `orders reset`: app.ResetJobs for the customers job, with
// the flags of `orders run` (they name the store, the topics and the group).
func cmdReset(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	var reprocess *bool
	cfg, log, job, err := jobFlags("orders reset", args, stderr, func(fs *flag.FlagSet) {
		reprocess = fs.Bool("reprocess", false, "also delete the job's internal topics and its group's offsets: recompute everything from the earliest orders")
	})
	if err != nil {
		return err
	}
	if err = app.ResetJobs(ctx, cfg, *reprocess, log, job); err == nil {
		fmt.Fprintln(stdout, "reset done")
	}
	return err
}

func cmdProduce(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("orders produce", flag.ContinueOnError)
	fs.SetOutput(stderr)
	p := defaultProduce()
	cli.BrokersFlag(fs, &p.Brokers)
	fs.StringVar(&p.Topic, "topic", p.Topic, "topic to send orders to")
	fs.Int64Var(&p.Count, "n", p.Count, "orders to generate (0: until interrupted)")
	fs.Int64Var(&p.Customers, "customers", p.Customers, "distinct customer ids c-1..c-N, Zipf-skewed popularity")
	fs.Float64Var(&p.Rate, "rate", p.Rate, "orders per second (0: as fast as possible)")
	fs.Uint64Var(&p.Seed, "seed", p.Seed, "random seed of the generator")
	fs.Int64Var(&p.BadEvery, "bad-every", p.BadEvery, "make every Nth order a bad one, dead-lettered by the job (0: none)")
	fromStdin := fs.Bool("stdin", false, `send the lines of stdin as they are, one order per line: {"order_id":"o-1","customer_id":"c-42","amount":12.5}`)
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *fromStdin {
		p.Stdin = stdin
	}
	log, err := app.NewLogger(stderr, *logLevel)
	if err != nil {
		return fmt.Errorf("%w: --log-level: %w", app.ErrConfig, err)
	}
	n, err := produceOrders(ctx, p, log)
	fmt.Fprintf(stdout, "sent %d orders to %s\n", n, p.Topic)
	return err
}
