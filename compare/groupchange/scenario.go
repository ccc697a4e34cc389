package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/app/bench"
	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
)

// phaseNames are the phases, in order. The first changes nothing: its
// stall is the pipeline's own latency (two transactional stages, each
// committing every commit interval), the baseline of the others.
var phaseNames = []string{
	"steady, no change",
	"scale-out 3 → 4",
	"rolling restart",
	"scale-in 4 → 3",
	"node lost, back at once",
	"node lost, back later",
}

// steadyFor is how long the steady phase measures.
const steadyFor = 15 * time.Second

// phaseResult is what one phase cost.
type phaseResult struct {
	actives   time.Duration // new or returning instance: start to its first running active (0: none; -1: never)
	balanced  time.Duration // phase start to balanced actives (-1: not within the settle timeout)
	stall     time.Duration
	stallPart int32
	gap       time.Duration
	gapAt     string
}

// systemResult is one system's run.
type systemResult struct {
	system string
	phases []phaseResult
	exact  bench.CheckReport
}

// scenario is one system's run of the phases.
type scenario struct {
	o        options
	system   string
	registry string
	appID    string
	input    string
	output   string
	dir      string
	out      io.Writer
	http     *http.Client
	all      []*instance
	live     []*instance
	truth    *bench.Truth
	encode   func(context.Context, avro.Rating) ([]byte, error)
}

func newScenario(ctx context.Context, o options, system, registry string, stamp int64, out io.Writer) (*scenario, error) {
	appID := fmt.Sprintf("gc%d-%s", stamp, system)
	sc := &scenario{o: o, system: system, registry: registry, appID: appID, input: appID + "-ratings",
		output: appID + "-averages", dir: filepath.Join(o.work, appID), out: out,
		http: &http.Client{Timeout: time.Second}, truth: bench.NewTruth()}
	reg, err := avro.NewRegistry(registry)
	if err != nil {
		return nil, err
	}
	sc.encode = bench.RegistryEncoder(reg, avro.ValueSubject(sc.input))
	for _, name := range []string{"a", "b", "c", "d"} {
		in, err := sc.newInstance(name)
		if err != nil {
			return nil, err
		}
		sc.all = append(sc.all, in)
	}
	return sc, nil
}

// close kills every instance left.
func (sc *scenario) close() {
	for _, in := range sc.all {
		if in.child != nil && !in.child.Exited() {
			in.child.Kill()
		}
	}
}

func (sc *scenario) logf(format string, args ...any) {
	fmt.Fprintf(sc.out, "%s %-9s "+format+"\n", append([]any{time.Now().Format("15:04:05.0"), sc.system}, args...)...)
}

// run fills the state, runs the phases with ratings flowing and checks the
// outputs at the end.
func (sc *scenario) run(ctx context.Context) (systemResult, error) {
	res := systemResult{system: sc.system}
	o := sc.o
	sp := engine.NewSaramaConfig("groupchange-produce")
	if err := app.EnsureTopic(o.brokers, sp, sc.input, int32(o.partitions)); err != nil {
		return res, err
	}
	// Kafka Streams does not create its sink topic.
	if err := app.EnsureTopic(o.brokers, sp, sc.output, int32(o.partitions)); err != nil {
		return res, err
	}
	sc.live = slices.Clone(sc.all[:3])
	for _, in := range sc.live {
		if err := sc.start(in); err != nil {
			return res, err
		}
	}
	for _, in := range sc.live {
		if err := sc.waitReady(in, 3*time.Minute); err != nil {
			return res, err
		}
	}
	sc.logf("3 instances ready; producing %d movies, one rating each", o.movies)
	fillStart := time.Now()
	took, err := bench.ProduceWorkload(ctx, bench.ProduceOptions{Brokers: o.brokers, Topic: sc.input, Encode: sc.encode},
		bench.Workload{Dist: bench.DistFill, Movies: o.movies}, sc.truth)
	if err != nil {
		return res, err
	}
	sc.logf("produced in %.1f s; waiting until the group has processed them", took.Seconds())
	stages := [][]string{{sc.input}, {sc.appID + "-ratings-by-movie-repartition"}}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	d, err := bench.DrainWatch{Brokers: o.brokers, Group: sc.appID, Stages: stages}.Wait(wctx)
	cancel()
	if err != nil {
		return res, err
	}
	sc.logf("state processed %.1f s after the produce began", d.At.Sub(fillStart).Seconds())
	if _, err := waitFor(o.settleTimeout, "actives balanced before the changes", sc.balanced); err != nil {
		return res, err
	}

	pr := newProbes(probeKeys(o.movies, o.partitions), o.partitions, sc.truth)
	pr.verbose = sc.out
	defer pr.close()
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	if err := pr.watchOutput(octx, o.brokers, sc.output); err != nil {
		return res, err
	}
	sf := engine.NewSaramaConfig("groupchange-flow")
	sf.Producer.Return.Successes = true
	sf.Producer.RequiredAcks = sarama.WaitForAll
	sf.Producer.Partitioner = engine.NewJavaPartitioner
	prod, err := sarama.NewSyncProducer(o.brokers, sf)
	if err != nil {
		return res, err
	}
	defer prod.Close()
	go pr.flow(prod, sc.encode, sc.input, o.movies, o.rate)
	defer pr.endFlow()
	if sc.system == "keepstate" {
		for _, in := range sc.live {
			pr.watchAPI(in.addr)
		}
	}
	if _, err := waitFor(time.Minute, "probe keys on the output topic", pr.primed); err != nil {
		return res, err
	}
	sc.logf("ratings and probes flowing")

	for i, name := range phaseNames {
		pr.worstStall()
		pr.worstGap()
		began := time.Now()
		sc.logf("phase %s", name)
		p, err := sc.phase(i, pr)
		if err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
		if err := pr.waitAnswered(time.Now(), 2*time.Minute); err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
		var stallAt time.Time
		p.stall, p.stallPart, stallAt = pr.worstStall()
		p.gap, p.gapAt = pr.worstGap()
		res.phases = append(res.phases, p)
		sc.logf("%s: new instance runs actives after %s, balanced after %s, longest stall %.2f s (partition %d, sent %s), longest query gap %.2f s (%s) [%.0f s]",
			name, seconds(p.actives), seconds(p.balanced), p.stall.Seconds(), p.stallPart, stallAt.UTC().Format("15:04:05.0"), p.gap.Seconds(), p.gapAt, time.Since(began).Seconds())
	}
	if err := pr.endFlow(); err != nil {
		return res, err
	}
	pr.close()
	sc.logf("flow stopped; waiting until the group has processed everything")
	wctx, cancel = context.WithTimeout(ctx, 10*time.Minute)
	_, err = bench.DrainWatch{Brokers: o.brokers, Group: sc.appID, Stages: stages}.Wait(wctx)
	cancel()
	if err != nil {
		return res, err
	}
	obs, err := bench.ScanOutputTopic(ctx, o.brokers, sc.output)
	if err != nil {
		return res, err
	}
	res.exact = sc.truth.Check(obs)
	sc.logf("output topic: %s", res.exact)
	if sc.system == "keepstate" && res.exact.OK() {
		for _, in := range sc.live {
			r := sc.checkAPI(ctx, in)
			sc.logf("API of %s: %s", in.name, r)
			if !r.OK() {
				res.exact = r
			}
		}
	}
	return res, nil
}

// checkAPI reads every movie through in's API, again while it is not exact
// (the store is written right after the commit), for 30 s plus 30 s per
// million movies: one scan of 3M movies takes about 2 min. A scan that
// fails counts every movie missing and names its error.
func (sc *scenario) checkAPI(ctx context.Context, in *instance) bench.CheckReport {
	var r bench.CheckReport
	budget := 30*time.Second + time.Duration(sc.truth.Movies())*30*time.Microsecond
	_, _ = waitFor(budget, "API exact", func() error {
		obs, err := bench.ScanAPI(ctx, "http://"+in.addr)
		r = bench.CheckReport{Movies: sc.truth.Movies(), Missing: sc.truth.Movies()}
		if err == nil {
			r = sc.truth.Check(obs)
		} else {
			r.Examples = []string{"scan failed: " + err.Error()}
		}
		if !r.OK() {
			return errors.New(r.String())
		}
		return nil
	})
	return r
}

// phase runs phase i and returns its figures but the probes'.
func (sc *scenario) phase(i int, pr *probes) (phaseResult, error) {
	var p phaseResult
	began := time.Now()
	// join starts in (empty or not), waits until it is ready and measures
	// how long until it runs an active.
	join := func(in *instance) error {
		if err := sc.start(in); err != nil {
			return err
		}
		started := time.Now()
		if err := sc.waitReady(in, 3*time.Minute); err != nil {
			return err
		}
		if sc.system == "keepstate" {
			pr.watchAPI(in.addr)
		}
		_, err := waitFor(sc.o.settleTimeout, in.name+" runs an active", func() error {
			if len(sc.stateOf(in).actives) == 0 {
				return errors.New("no active running")
			}
			return nil
		})
		if err != nil {
			sc.logf("%v", err)
			p.actives = -1
			return nil
		}
		p.actives = time.Since(started)
		return nil
	}
	leave := func(in *instance, kill bool) {
		pr.unwatchAPI(in.addr)
		if kill {
			in.child.Kill()
		} else {
			in.child.Stop(time.Minute)
		}
	}
	switch i {
	case 0: // steady: nothing to balance
		time.Sleep(steadyFor) // the window being measured
		return p, nil
	case 1: // scale-out
		d := sc.all[3]
		sc.live = append(sc.live, d)
		if err := join(d); err != nil {
			return p, err
		}
	case 2: // rolling restart
		for _, in := range sc.live {
			leave(in, false)
			if err := join(in); err != nil {
				return p, err
			}
			p.actives = 0 // a returning instance keeps its state: not reported
			// The next instance goes once every partition runs again.
			if _, err := waitFor(sc.o.settleTimeout, "every partition running after restarting "+in.name, sc.covered); err != nil {
				sc.logf("%v", err)
			}
		}
	case 3: // scale-in
		d := sc.live[len(sc.live)-1]
		sc.live = sc.live[:len(sc.live)-1]
		leave(d, false)
	case 4, 5: // node lost with its volume
		in := sc.live[i-3]
		leave(in, true)
		if err := os.RemoveAll(in.dir); err != nil {
			return p, err
		}
		if i == 5 {
			time.Sleep(sc.o.lostFor) // the outage being simulated
			began = time.Now()
		}
		if err := join(in); err != nil {
			return p, err
		}
	}
	if _, err := waitFor(sc.o.settleTimeout, "actives balanced", sc.balanced); err != nil {
		sc.logf("%v", err)
		p.balanced = -1
	} else {
		p.balanced = time.Since(began)
	}
	return p, nil
}
