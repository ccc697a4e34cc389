// Command throughput compares, on one running Kafka broker, the end-to-end
// throughput of keepstate (clover and redis stores), goka (compare/goka)
// and Kafka Streams (compare/kstreams, at-least-once and exactly_once_v2)
// doing the same job: read Avro ratings, re-key them by movie through a
// repartition topic, keep count and sum per movie in a local or Redis
// store, write the average to an output topic.
//
// The ratings are produced once to one input topic; every system then runs
// as a child process in its own consumer group (static membership) from
// the earliest offset, interleaved run after run, each round starting one
// system later than the one before. A measurement is the
// time from the child's start until its group has committed every input
// and repartition offset; CPU time and peak RSS are read from /proc at
// that moment; then every movie is checked exact against the ratings
// produced (keepstate through its API, the others through the last value
// per movie on their output topic). It prints every measurement and a
// table of medians.
//
//	scripts/bench-compare.sh          # starts Apache Kafka, builds everything, runs this
//	go run ./compare/throughput --brokers 127.0.0.1:9092 --redis-url redis://127.0.0.1:6379/0 \
//	    --goka-bin compare/goka/bin/goka-compare --kstreams-jar compare/kstreams/target/kstreams-ratings-1.jar
//
// It imports no goka and no Java: the other systems are binaries it starts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/keepstate/keepstate/app/bench"
	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/compare/internal/machine"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "throughput:", err)
		os.Exit(1)
	}
}

// options are the command-line settings.
type options struct {
	brokers        []string
	redisURL       string
	systems        []string
	runs           int
	movies         int64
	ratings        int64
	dist           string
	partitions     int
	commitInterval time.Duration
	timeout        time.Duration
	ksBin, gokaBin string
	jar, java      string
	javaOpts       string
	work           string
	keep           bool
	markdown       string
	seed           uint64
}

var allSystems = []string{"keepstate-clover", "keepstate-redis", "goka", "kstreams-alos", "kstreams-eos"}

func run(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("throughput", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "running Kafka broker(s), comma separated (required)")
	systems := fs.String("systems", strings.Join(allSystems, ","), "systems to measure, comma separated")
	uniform := fs.Bool("uniform", false, "uniform movie popularity instead of Zipf")
	fs.StringVar(&o.redisURL, "redis-url", "", "Redis for keepstate-redis (required with it)")
	fs.IntVar(&o.runs, "runs", 3, "interleaved runs of every system (medians are reported)")
	fs.Int64Var(&o.movies, "movies", 62000, "distinct movies")
	fs.Int64Var(&o.ratings, "ratings", 1000000, "ratings produced once, read by every system")
	fs.IntVar(&o.partitions, "partitions", 3, "partitions of the input topic")
	fs.DurationVar(&o.commitInterval, "commit-interval", time.Second, "commit interval of every system (keepstate --commit-interval, Kafka Streams commit.interval.ms; goka commits every 1s)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up on one measurement after this long")
	fs.StringVar(&o.ksBin, "keepstate-bin", "bin/keepstate", "keepstate binary")
	fs.StringVar(&o.gokaBin, "goka-bin", "compare/goka/bin/goka-compare", "compare/goka binary (goka-throughput subcommand)")
	fs.StringVar(&o.jar, "kstreams-jar", "compare/kstreams/target/kstreams-ratings-1.jar", "Kafka Streams reference app jar (mvn package in compare/kstreams)")
	fs.StringVar(&o.java, "java", "java", "java binary")
	fs.StringVar(&o.javaOpts, "java-opts", "", "extra JVM flags for Kafka Streams, space separated (default: the JVM's own heap sizing)")
	fs.StringVar(&o.work, "work-dir", "", "scratch directory (default: a temporary one, removed)")
	fs.BoolVar(&o.keep, "keep", false, "keep the scratch directory (child logs)")
	fs.StringVar(&o.markdown, "markdown", "", "also append the result as Markdown to this file")
	fs.Uint64Var(&o.seed, "seed", 1, "workload seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.brokers = strings.Split(*brokers, ",")
	o.systems = strings.Split(*systems, ",")
	o.dist = bench.DistZipf
	if *uniform {
		o.dist = bench.DistUniform
	}
	if *brokers == "" {
		return errors.New("--brokers is required (scripts/bench-compare.sh starts Apache Kafka)")
	}
	for _, s := range o.systems {
		if !slices.Contains(allSystems, s) {
			return fmt.Errorf("unknown system %q (want %s)", s, strings.Join(allSystems, ","))
		}
		if s == "keepstate-redis" && o.redisURL == "" {
			return errors.New("keepstate-redis needs --redis-url")
		}
	}
	var err error
	if o.work == "" {
		if o.work, err = os.MkdirTemp("", "keepstate-throughput-"); err != nil {
			return err
		}
		if !o.keep {
			defer os.RemoveAll(o.work)
		}
	}
	fmt.Fprintln(out, "scratch directory:", o.work)

	reg := srfake.New()
	defer reg.Close()
	client, err := avro.NewRegistry(reg.URL())
	if err != nil {
		return err
	}
	stamp := time.Now().Unix() % 1e6
	input := fmt.Sprintf("tp-ratings-%d", stamp)
	w := bench.Workload{Dist: o.dist, Movies: o.movies, Ratings: o.ratings, Seed: o.seed}
	truth := bench.NewTruth()
	header := describe(o, input)
	fmt.Fprint(out, header)
	fmt.Fprintf(out, "producing %d ratings to %s ...\n", o.ratings, input)
	took, err := bench.ProduceWorkload(ctx, bench.ProduceOptions{Brokers: o.brokers, Topic: input, Partitions: int32(o.partitions),
		Encode: bench.RegistryEncoder(client, avro.ValueSubject(input))}, w, truth)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "produced in %.1f s (%d movies rated)\n", took.Seconds(), truth.Movies())

	e := &env{o: o, input: input, registry: reg.URL(), truth: truth, stamp: stamp, out: out}
	results := map[string][]measurement{}
	for r := 1; r <= o.runs; r++ {
		for _, s := range roundOrder(o.systems, r) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m, err := e.measure(ctx, s, r)
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", r, s, err)
			}
			fmt.Fprintf(out, "run %d %-17s %8.0f ratings/s (%6.2f s)  CPU %6.1f s  peak RSS %5.0f MiB  %s\n",
				r, s, m.rate, m.seconds, m.cpu, m.rssMiB, m.check)
			results[s] = append(results[s], m)
		}
	}
	table := summarize(o, results)
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
	for s, ms := range results {
		for i, m := range ms {
			if !m.check.OK() {
				return fmt.Errorf("%s run %d: not exact: %s", s, i+1, m.check)
			}
		}
	}
	return nil
}

// roundOrder returns the systems in the order round r (from 1) measures
// them: each round starts one system later, so no system is always the
// one measured first, right after the produce, while the broker is still
// busy writing it out (it measured a fifth to a half slower there).
func roundOrder(systems []string, r int) []string {
	n := (r - 1) % len(systems)
	return append(slices.Clone(systems[n:]), systems[:n]...)
}

// describe returns the versions and settings of the comparison.
func describe(o options, input string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n- date: %s; machine: %s/%s, %d cores, load average at start %s\n",
		time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), machine.LoadAvg())
	fmt.Fprintf(&b, "- keepstate %s (%s); goka %s; Kafka Streams 4.1.1 on %s\n",
		machine.Command("git", "rev-parse", "--short", "HEAD"), runtime.Version(), gokaVersion(o.gokaBin), machine.JavaVersion(o.java))
	fmt.Fprintf(&b, "- broker %s; input %s: %d ratings over %d movies, %s, %d partitions; commit interval %s; %d interleaved runs\n",
		strings.Join(o.brokers, ","), input, o.ratings, o.movies, o.dist, o.partitions, o.commitInterval, o.runs)
	return b.String()
}

// gokaVersion reads the goka and sarama versions built into bin.
func gokaVersion(bin string) string {
	var goka, sarama string
	for _, line := range strings.Split(machine.Command("go", "version", "-m", bin), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "dep" && f[1] == "github.com/lovoo/goka" {
			goka = f[2]
		}
		if len(f) >= 3 && f[0] == "dep" && f[1] == "github.com/IBM/sarama" {
			sarama = f[2]
		}
	}
	return fmt.Sprintf("%s (sarama %s)", goka, sarama)
}

// deleteTopics deletes every topic whose name starts with prefix (a
// finished measurement's internal topics), to keep the broker's disk small.
func deleteTopics(brokers []string, prefix string) error {
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	admin, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		return err
	}
	defer admin.Close()
	topics, err := admin.ListTopics()
	if err != nil {
		return err
	}
	for t := range topics {
		if strings.HasPrefix(t, prefix) {
			if err := admin.DeleteTopic(t); err != nil {
				return fmt.Errorf("delete topic %s: %w", t, err)
			}
		}
	}
	return nil
}

// createTopic creates topic with n partitions (replication 1).
func createTopic(brokers []string, topic string, n int32) error {
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	admin, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		return err
	}
	defer admin.Close()
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: n, ReplicationFactor: 1}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// childDir returns (and creates) the scratch directory of one measurement.
func childDir(work, name string) (string, error) {
	d := filepath.Join(work, name)
	return d, os.MkdirAll(d, 0o755)
}
