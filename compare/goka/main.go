// Command goka-compare measures, on one machine and one broker, how long a
// stream processor takes to answer again after kill -9 and an immediate
// restart: keepstate (with and without --instance-id) against goka
// (github.com/lovoo/goka). Each processor runs as a child process with its
// state on local disk; the program kills it with SIGKILL, restarts it at
// once, produces one rating for a probe key, and polls the probe key's
// lookup until it answers 200 and until the new rating is counted.
//
//	cd compare/goka && go run .            # in-process kfake broker
//	cd compare/goka && go run . --real     # Apache Kafka via ../../scripts/kafka.sh
//	cd compare/goka && go run . --both     # one after the other
//
// `goka-compare goka-throughput` is the goka side of the throughput
// comparison (../throughput, scripts/bench-compare.sh): see throughput.go.
//
// It is a separate Go module so that the main module's tests, vet and
// staticcheck never see goka. Results: docs/benchmarks.md, "Restart after kill -9".
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/sr/srfake"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "goka-throughput" {
		if err := gokaThroughput(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "goka-child" {
		if err := gokaChild(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "goka-compare:", err)
		os.Exit(1)
	}
}

// options are the command-line settings of a benchmark run.
type options struct {
	real, both     bool
	brokers        string
	trials         int
	session        time.Duration
	commitInterval time.Duration
	settle         time.Duration
	trialTimeout   time.Duration
	interval       time.Duration
	load, keys     int
	probeStart     int64
	partitions     int
	systems        string
	ksBin          string
	repo           string
	keep           bool
	worktree       bool
	markdown       string
	ksLogLevel     string
}

func run(args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("goka-compare", flag.ContinueOnError)
	fs.BoolVar(&o.real, "real", false, "use Apache Kafka started by scripts/kafka.sh instead of kfake")
	fs.BoolVar(&o.both, "both", false, "run on kfake, then on Apache Kafka")
	fs.StringVar(&o.brokers, "brokers", "", "use this running broker (host:port,...) instead of starting one; names get a unique suffix")
	fs.IntVar(&o.trials, "trials", 3, "kill -9 + restart measurements per system")
	fs.DurationVar(&o.session, "session-timeout", 10*time.Second, "consumer group session timeout of every system")
	fs.DurationVar(&o.commitInterval, "commit-interval", 200*time.Millisecond, "keepstate --commit-interval")
	fs.DurationVar(&o.settle, "settle", 2500*time.Millisecond, "wait before each kill (commits and heartbeats settle)")
	fs.DurationVar(&o.trialTimeout, "trial-timeout", 60*time.Second, "give up on a restart after this long")
	fs.DurationVar(&o.interval, "poll", 20*time.Millisecond, "pause between two lookups of one endpoint")
	fs.IntVar(&o.load, "load", 2000, "ratings produced before the first kill")
	fs.IntVar(&o.keys, "keys", 100, "distinct keys (movies) of that load")
	fs.Int64Var(&o.probeStart, "probe-ratings", 5, "ratings of the probe key before the first kill")
	fs.IntVar(&o.partitions, "partitions", 3, "partitions of the input topics")
	fs.StringVar(&o.systems, "systems", "goka,goka-static,keepstate-static,keepstate-dynamic", "systems to measure, comma separated")
	fs.StringVar(&o.ksBin, "keepstate-bin", "", "keepstate binary (default: build ../../cmd/keepstate)")
	fs.StringVar(&o.repo, "repo", "../..", "root of the keepstate repository")
	fs.StringVar(&o.ksLogLevel, "keepstate-log-level", "info", "keepstate run --log-level (its log is in the scratch directory)")
	fs.BoolVar(&o.worktree, "worktree", false, "build keepstate from the working tree instead of the committed HEAD")
	fs.BoolVar(&o.keep, "keep", false, "keep the scratch directory (child logs, stores)")
	fs.StringVar(&o.markdown, "markdown", "", "also append the result tables as Markdown to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	repo, err := filepath.Abs(o.repo)
	if err != nil {
		return err
	}
	o.repo = repo

	work, err := os.MkdirTemp("", "compare-goka-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(out, "scratch directory (kept):", work)
	} else {
		defer os.RemoveAll(work)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	self, err := os.Executable()
	if err != nil {
		return err
	}
	ksSource := "binary " + o.ksBin + " (--keepstate-bin)"
	if o.ksBin == "" {
		var what string
		if o.ksBin, what, err = buildKeepstate(ctx, o.repo, work, o.worktree); err != nil {
			return err
		}
		fmt.Fprintln(out, "built keepstate from the", what)
		ksSource = "built from the " + what
	}
	header := describe(o, ksSource)
	fmt.Fprint(out, header)

	brokers := []string{"kfake"}
	switch {
	case o.brokers != "":
		brokers = []string{"existing"}
	case o.both:
		brokers = []string{"kfake", "real"}
	case o.real:
		brokers = []string{"real"}
	}
	var md strings.Builder
	md.WriteString(header)
	for _, b := range brokers {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		table, err := runBroker(ctx, o, b, filepath.Join(work, b), self, out)
		if err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		md.WriteString(table)
	}
	if o.markdown != "" {
		f, err := os.OpenFile(o.markdown, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteString(md.String()); err != nil {
			return err
		}
	}
	return nil
}

// describe returns the machine and version lines of the report.
func describe(o options, ksSource string) string {
	var b strings.Builder
	commit := "unknown"
	if out, err := exec.Command("git", "-C", o.repo, "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	gokaV, saramaV := "?", "?"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/lovoo/goka":
				gokaV = d.Version
			case "github.com/IBM/sarama":
				saramaV = d.Version
			}
		}
	}
	load := "?"
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(raw))[:3], " ")
	}
	fmt.Fprintf(&b, "\n- date: %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "- machine: %s/%s, %d cores, load average at start %s\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), load)
	fmt.Fprintf(&b, "- %s, goka %s, sarama %s (goka side), keepstate commit %s, %s\n", runtime.Version(), gokaV, saramaV, commit, ksSource)
	fmt.Fprintf(&b, "- session timeout %s for every system; keepstate --commit-interval %s; %d trials; %d partitions; %d ratings over %d keys before the first kill\n",
		o.session, o.commitInterval, o.trials, o.partitions, o.load, o.keys)
	return b.String()
}

// runBroker starts one broker and measures every system on it; it returns
// the Markdown result table.
func runBroker(ctx context.Context, o options, kind, work, self string, out io.Writer) (string, error) {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	var br *broker
	var err error
	suffix := ""
	switch kind {
	case "real":
		fmt.Fprintln(out, "\nstarting Apache Kafka with scripts/kafka.sh ...")
		br, err = startRealKafka(o.repo, filepath.Join(work, "kafka"))
	case "existing":
		br = &broker{name: "broker at " + o.brokers, addrs: strings.Split(o.brokers, ","), stop: func() {}}
		suffix = fmt.Sprintf("-%d", time.Now().Unix())
	default:
		br, err = startKfake(o.partitions)
	}
	if err != nil {
		return "", err
	}
	defer br.stop()
	reg := srfake.New()
	defer reg.Close()
	fmt.Fprintf(out, "\n## broker: %s at %s\n", br.name, strings.Join(br.addrs, ","))

	e := &env{addrs: br.addrs, work: work, out: out, self: self, ksBin: o.ksBin, registry: reg.URL(),
		suffix: suffix, session: o.session, partitions: int32(o.partitions), load: o.load, keys: o.keys,
		readyTimeout: 90 * time.Second, commitInterval: o.commitInterval, ksLogLevel: o.ksLogLevel}

	var rows []*row
	var baselines [][2]string
	for _, name := range strings.Split(o.systems, ",") {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		sys, err := newSystem(e, strings.TrimSpace(name))
		if err != nil {
			return "", err
		}
		mine, base, err := measure(ctx, o, sys, out)
		sys.close()
		if err != nil {
			return "", err
		}
		rows = append(rows, mine...)
		baselines = append(baselines, [2]string{sys.name(), summarizeDurations(base).String()})
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\n### %s\n\n", br.name)
	fmt.Fprintf(&b, "Seconds from the restart (right after kill -9), median (min–max) of %d trials:\n\n", o.trials)
	b.WriteString("| system | lookup | first 200 | 200 from then on | rating produced after the restart counted | counts |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range rows {
		var first, steady, seen []time.Duration
		counts := "exact"
		for i, x := range r.res {
			first, steady, seen = append(first, x.firstOK), append(steady, x.steadyOK), append(seen, x.newSeen)
			if x.maxCount > r.want[i] {
				counts = fmt.Sprintf("over by %d (trial %d)", x.maxCount-r.want[i], i+1)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.system, r.lookup,
			summarizeDurations(first), summarizeDurations(steady), summarizeDurations(seen), counts)
	}
	b.WriteString("\nBaseline, no restart: seconds from producing one rating until the lookup counts it (polled every 10 ms):\n\n")
	b.WriteString("| system | one rating counted |\n|---|---|\n")
	for _, x := range baselines {
		fmt.Fprintf(&b, "| %s | %s |\n", x[0], x[1])
	}
	fmt.Fprint(out, b.String())
	return b.String(), nil
}

// row is one line of the result table: one lookup of one system.
type row struct {
	system, lookup string
	res            []probeResult
	want           []int64 // the probe count expected after each restart
}

// measure sets sys up and runs the trials: per trial a baseline (one
// rating while nothing restarts), a pause, kill -9, an immediate restart,
// one rating produced right after it, and the watch of every lookup. It
// returns one row per lookup and the baseline durations.
func measure(ctx context.Context, o options, sys system, out io.Writer) ([]*row, []time.Duration, error) {
	fmt.Fprintf(out, "\n%s: setting up ...\n", sys.name())
	want := o.probeStart
	if err := sys.setup(want); err != nil {
		return nil, nil, err
	}
	probes := sys.probes()
	rows := make([]*row, len(probes))
	for i, p := range probes {
		rows[i] = &row{system: sys.name(), lookup: p.label}
	}
	var base []time.Duration
	for t := 1; t <= o.trials && ctx.Err() == nil; t++ {
		tb := time.Now()
		if err := sys.produceProbe(); err != nil {
			return nil, nil, err
		}
		want++
		if err := waitCount(probes[0].url, want, o.trialTimeout); err != nil {
			return nil, nil, fmt.Errorf("%s: baseline: %w", sys.name(), err)
		}
		d := time.Since(tb)
		base = append(base, d)
		fmt.Fprintf(out, "  trial %d baseline: one rating counted %s after it was produced (no restart)\n", t, secs(d))

		time.Sleep(o.settle)
		if sys.current().exited() {
			return nil, nil, fmt.Errorf("%s: the child exited by itself (run with --keep to read its log)", sys.name())
		}
		sys.current().kill()
		t0 := time.Now()
		if _, err := sys.start(); err != nil {
			return nil, nil, err
		}
		if err := sys.produceProbe(); err != nil {
			return nil, nil, err
		}
		want++
		res := watch(probes, t0, want, o.interval, time.Second, o.trialTimeout)
		for i, r := range res {
			rows[i].res = append(rows[i].res, r)
			rows[i].want = append(rows[i].want, want)
			fmt.Fprintf(out, "  trial %d %-18s first 200 %-8s steadily 200 %-8s new rating counted %-8s (count %d, want %d, %d polls)\n",
				t, probes[i].label, secs(r.firstOK), secs(r.steadyOK), secs(r.newSeen), r.maxCount, want, r.polls)
		}
	}
	return rows, base, nil
}

// newSystem returns the system called name.
func newSystem(e *env, name string) (system, error) {
	switch name {
	case "goka":
		return newGoka(e, "goka (defaults: dynamic membership)", "goka-ratings"+e.suffix, "")
	case "goka-static":
		return newGoka(e, "goka + sarama static membership", "goka-ratings-static"+e.suffix, "goka-0")
	case "keepstate-static":
		return newKeepstate(e, "keepstate --instance-id ks-0", "ks-static"+e.suffix, "ks-0")
	case "keepstate-dynamic":
		return newKeepstate(e, "keepstate (no --instance-id)", "ks-dynamic"+e.suffix, "")
	}
	return nil, fmt.Errorf("unknown system %q (goka, goka-static, keepstate-static, keepstate-dynamic)", name)
}
