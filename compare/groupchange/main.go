// Command groupchange runs the group changes a Kubernetes deployment goes
// through against keepstate (clover, one standby) and Kafka Streams
// (compare/kstreams, exactly_once_v2, num.standby.replicas=1, KIP-441's
// warm-ups with probing.rebalance.interval.ms at its 60 s minimum), one
// after the other on the same running Kafka broker, and reports what each
// phase cost:
//
//  1. scale-out 3 → 4 (an empty state directory);
//  2. a rolling restart of every instance (SIGTERM, restart, running, next);
//  3. scale-in 4 → 3 (SIGTERM);
//  4. kill -9 of an instance, its state directory deleted, restarted at once
//     (a node lost with its volume);
//  5. the same, restarted after --lost-for (a pod rescheduled slowly).
//
// Each system gets its own input topic: every movie rated once (the
// state), then ratings flowing at --rate throughout, uniform over the
// movies, and every 500 ms one rating of a probe key of every partition
// (keys outside the catalog, rated 0 and then 10, so that the average on
// the output topic says how many of its ratings were processed). Per
// phase it reports: when the new or returning instance first ran an active
// partition and when the actives were balanced again (at most one apart),
// the longest time a probe rating took to reach the output topic (the
// processing stall, commit interval included) and, for keepstate, the
// longest time a live instance left a probe key unanswered by its API
// (asked every 100 ms). At the end every movie must be exact on the output
// topic (and, for keepstate, on the API).
//
//	scripts/bench-compare.sh groupchange              # starts Apache Kafka, builds, runs this
//	go run ./compare/groupchange --brokers 127.0.0.1:9092 --movies 600000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/keepstate/keepstate/compare/internal/machine"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "groupchange:", err)
		os.Exit(1)
	}
}

// options are the command-line settings.
type options struct {
	brokers        []string
	systems        []string
	movies         int64
	partitions     int
	rate           int
	commitInterval time.Duration
	session        time.Duration
	lostFor        time.Duration
	settleTimeout  time.Duration
	ksBin, jar     string
	java, javaOpts string
	work           string
	keep           bool
	markdown       string
}

var allSystems = []string{"keepstate", "kstreams"}

func run(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("groupchange", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "a running Kafka broker (required)")
	systems := fs.String("systems", strings.Join(allSystems, ","), "systems to run, comma separated")
	fs.Int64Var(&o.movies, "movies", 600000, "movies in the state (each rated once before the changes)")
	fs.IntVar(&o.partitions, "partitions", 12, "partitions of the input topic (and of every topic the systems create)")
	fs.IntVar(&o.rate, "rate", 3000, "ratings per second flowing throughout the changes, uniform over the movies")
	fs.DurationVar(&o.commitInterval, "commit-interval", time.Second, "commit interval of both systems")
	fs.DurationVar(&o.session, "session-timeout", 10*time.Second, "consumer group session timeout of both systems")
	fs.DurationVar(&o.lostFor, "lost-for", 15*time.Second, "how long the last phase's lost instance stays away")
	fs.DurationVar(&o.settleTimeout, "settle-timeout", 150*time.Second, "give up waiting for balanced actives after this long")
	fs.StringVar(&o.ksBin, "keepstate-bin", "bin/keepstate", "keepstate binary")
	fs.StringVar(&o.jar, "kstreams-jar", "compare/kstreams/target/kstreams-ratings-1.jar", "Kafka Streams reference app jar (mvn package in compare/kstreams)")
	fs.StringVar(&o.java, "java", "java", "java binary")
	fs.StringVar(&o.javaOpts, "java-opts", "-Xmx1g", "JVM flags for Kafka Streams, space separated")
	fs.StringVar(&o.work, "work-dir", "", "scratch directory (default: a temporary one, removed)")
	fs.BoolVar(&o.keep, "keep", false, "keep the scratch directory (instance logs)")
	fs.StringVar(&o.markdown, "markdown", "", "also append the result as Markdown to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" {
		return errors.New("--brokers is required (scripts/bench-compare.sh groupchange starts Apache Kafka)")
	}
	o.brokers = strings.Split(*brokers, ",")
	o.systems = strings.Split(*systems, ",")
	for _, s := range o.systems {
		if !slices.Contains(allSystems, s) {
			return fmt.Errorf("unknown system %q (want %s)", s, strings.Join(allSystems, ","))
		}
	}
	if o.movies < 1 || o.partitions < 2 || o.rate < 10 {
		return errors.New("--movies must be at least 1, --partitions at least 2, --rate at least 10")
	}
	if o.work == "" {
		var err error
		if o.work, err = os.MkdirTemp("", "keepstate-groupchange-"); err != nil {
			return err
		}
		if !o.keep {
			defer os.RemoveAll(o.work)
		}
	}
	fmt.Fprintln(out, "scratch directory:", o.work)
	reg := srfake.New()
	defer reg.Close()

	header := fmt.Sprintf("\n- date: %s; machine: %s/%s, %d cores, load average at start %s\n"+
		"- keepstate %s (clover, --standby-replicas 1); Kafka Streams 4.1.1 (exactly_once_v2, num.standby.replicas 1, probing.rebalance.interval.ms 60000) on %s\n"+
		"- broker %s; %d movies rated once, then %d ratings/s uniform; %d partitions; commit interval %s; session timeout %s; last phase's instance away %s\n",
		time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), machine.LoadAvg(),
		machine.Command("git", "rev-parse", "--short", "HEAD"), machine.JavaVersion(o.java),
		strings.Join(o.brokers, ","), o.movies, o.rate, o.partitions, o.commitInterval, o.session, o.lostFor)
	fmt.Fprint(out, header)
	stamp := time.Now().Unix() % 1e6
	var results []systemResult
	for _, s := range o.systems {
		sc, err := newScenario(ctx, o, s, reg.URL(), stamp, out)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		res, err := sc.run(ctx)
		sc.close()
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		results = append(results, res)
	}
	table := summarize(results)
	fmt.Fprint(out, "\n"+table)
	if o.markdown != "" {
		f, err := os.OpenFile(o.markdown, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := fmt.Fprintf(f, "%s\n%s", header, table); err != nil {
			return err
		}
	}
	for _, r := range results {
		if !r.exact.OK() {
			return fmt.Errorf("%s: not exact at the end: %s", r.system, r.exact)
		}
	}
	return nil
}

// summarize renders one Markdown table: a row per phase and system.
func summarize(results []systemResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Load average at the end %s. \"Actives\": from the (re)start of the new instance until it ran an active partition; "+
		"\"balanced\": from the phase's start until every partition ran, actives at most one apart; "+
		"\"stall\": the longest a probe rating took to reach the output topic (its partition); \"query gap\": the longest a live keepstate instance left a probe key unanswered.\n\n", machine.LoadAvg())
	b.WriteString("| phase | system | new instance runs actives after | balanced after | longest stall | longest query gap |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for i := range phaseNames {
		for _, r := range results {
			if i >= len(r.phases) {
				continue
			}
			p := r.phases[i]
			gap := "—"
			if r.system == "keepstate" {
				gap = fmt.Sprintf("%.2f s", p.gap.Seconds())
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %.2f s (partition %d) | %s |\n", phaseNames[i], r.system,
				seconds(p.actives), seconds(p.balanced), p.stall.Seconds(), p.stallPart, gap)
		}
	}
	for _, r := range results {
		fmt.Fprintf(&b, "\n%s at the end: %s.", r.system, r.exact)
	}
	b.WriteString("\n")
	return b.String()
}

// seconds renders d, or "—" for none and "not within the settle timeout"
// for a negative d.
func seconds(d time.Duration) string {
	switch {
	case d == 0:
		return "—"
	case d < 0:
		return "not within the settle timeout"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}
