// Command keepstate is a Kafka stream processor whose state lives in a
// persistent, queryable store. Subcommands: run, demo, produce, reset, bench.
// Every flag also reads an environment variable KEEPSTATE_<FLAG> (dashes as
// underscores); a flag given on the command line wins.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/app/demo"
	"github.com/keepstate/keepstate/internal/cli"
)

const usage = `keepstate — a Kafka stream processor with a persistent, queryable state store.

Usage:
  keepstate run      [flags]   run the service (processor + HTTP API)
  keepstate demo     [flags]   everything in one process: in-process Kafka, Schema Registry, generator, API
  keepstate produce  [flags]   send Avro ratings (generated, or JSON lines from stdin with --stdin)
  keepstate reset    [flags]   wipe the store (rebuilt from the changelog on next start); --reprocess also recomputes from the input
  keepstate bench    [flags]   end-to-end benchmark: produce ratings, time keepstate run as a child, check every movie

Run "keepstate <command> -h" for the flags of a command. Every flag has an
environment variable KEEPSTATE_<FLAG> with dashes as underscores.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process exit code: 0 ok,
// 1 failure, 2 bad usage or a service that is not reachable.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd := commands[args[0]]
	if cmd == nil {
		fmt.Fprintf(stderr, "keepstate: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	err := cmd(ctx, args[1:], stdin, stdout, stderr)
	return cli.ExitCode(stderr, "keepstate", args[0], err, app.ErrGroupActive)
}

// commands are the subcommands, by name.
var commands = map[string]func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error{
	"run": cmdRun, "demo": cmdDemo, "produce": cmdProduce, "reset": cmdReset, "bench": cmdBench,
}

func cmdRun(ctx context.Context, args []string, _ io.Reader, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("keepstate run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := app.Default()
	cli.CommonFlags(fs, &cfg)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	log, err := app.NewLogger(stderr, cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("%w: --log-level: %w", app.ErrConfig, err)
	}
	return app.Run(ctx, cfg, log, nil)
}

func cmdDemo(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keepstate demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := demo.Default()
	d.Out = stdout
	cli.CommonFlags(fs, &d.Config)
	fs.StringVar(&d.KafkaAddr, "kafka-addr", d.KafkaAddr, "listen address of the in-process Kafka broker")
	fs.StringVar(&d.RegistryAddr, "registry-addr", d.RegistryAddr, "listen address of the in-process Schema Registry")
	fs.Float64Var(&d.Rate, "rate", d.Rate, "generated ratings per second (0: no generator)")
	fs.Int64Var(&d.Movies, "movies", d.Movies, "number of distinct generated movies")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	log, err := app.NewLogger(stderr, d.LogLevel)
	if err != nil {
		return fmt.Errorf("%w: --log-level: %w", app.ErrConfig, err)
	}
	return demo.Run(ctx, d, log)
}

func cmdProduce(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keepstate produce", flag.ContinueOnError)
	fs.SetOutput(stderr)
	p := app.DefaultProduce()
	logLevel := "info"
	cli.BrokersFlag(fs, &p.Brokers)
	fs.StringVar(&p.SchemaRegistry, "schema-registry", p.SchemaRegistry, "Schema Registry URL")
	cli.RegistryAuthFlags(fs, &p.SchemaRegistryUser, &p.SchemaRegistryPassword, &p.SchemaRegistryPasswordFile)
	fs.StringVar(&p.Topic, "topic", p.Topic, "topic to send ratings to")
	fs.Int64Var(&p.Count, "count", p.Count, "ratings to generate (0: until interrupted)")
	fs.Int64Var(&p.Movies, "movies", p.Movies, "distinct movie ids (1..movies, Zipf-skewed popularity)")
	fs.Float64Var(&p.Rate, "rate", p.Rate, "ratings per second (0: as fast as possible)")
	fs.Uint64Var(&p.Seed, "seed", p.Seed, "random seed of the generator")
	fromStdin := fs.Bool("stdin", false, `read ratings as JSON lines from stdin: {"movie_id":362,"rating":10}`)
	fs.StringVar(&logLevel, "log-level", logLevel, "debug, info, warn or error")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *fromStdin {
		p.Stdin = stdin
	}
	log, err := app.NewLogger(stderr, logLevel)
	if err != nil {
		return fmt.Errorf("%w: --log-level: %w", app.ErrConfig, err)
	}
	n, err := app.Produce(ctx, p, log)
	fmt.Fprintf(stdout, "sent %d ratings to %s\n", n, p.Topic)
	return err
}

func cmdReset(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keepstate reset", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := app.Default()
	cli.CommonFlags(fs, &cfg)
	reprocess := fs.Bool("reprocess", false, "also delete the internal topics and the group's offsets: recompute everything from the earliest input")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	log, err := app.NewLogger(stderr, cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("%w: --log-level: %w", app.ErrConfig, err)
	}
	if err := app.Reset(ctx, cfg, *reprocess, log); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "reset done")
	return nil
}
