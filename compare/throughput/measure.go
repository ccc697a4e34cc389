package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/keepstate/keepstate/app/bench"
	"github.com/keepstate/keepstate/compare/internal/machine"
)

// env is what every measurement shares.
type env struct {
	o        options
	input    string
	registry string
	truth    *bench.Truth
	stamp    int64
	out      io.Writer
}

// measurement is one system's run.
type measurement struct {
	seconds, rate, cpu, rssMiB float64
	check                      bench.CheckReport
}

// measure starts system s as a child in a fresh group, waits until the
// group has committed every input and repartition offset, reads its CPU
// time and peak RSS, kills it and checks every movie.
func (e *env) measure(ctx context.Context, s string, run int) (measurement, error) {
	var m measurement
	appID := fmt.Sprintf("tp%d-%s-%d", e.stamp, s, run)
	dir, err := childDir(e.o.work, appID)
	if err != nil {
		return m, err
	}
	addr, err := bench.FreeTCPAddr()
	if err != nil {
		return m, err
	}
	output := appID + "-averages"
	repartition := appID + "-ratings-by-movie-repartition"
	ci := e.o.commitInterval
	var bin string
	var args []string
	switch s {
	case "keepstate-clover", "keepstate-redis":
		store := strings.TrimPrefix(s, "keepstate-")
		bin = e.o.ksBin
		args = []string{"run", "--brokers", strings.Join(e.o.brokers, ","), "--schema-registry", e.registry,
			"--store", store, "--data-dir", filepath.Join(dir, "store"), "--http-addr", addr, "--advertise-addr", addr,
			"--application-id", appID, "--input-topic", e.input, "--output-topic", output,
			"--instance-id", "ks-0", "--commit-interval", ci.String(), "--log-level", "warn"}
		if store == "redis" {
			args = append(args, "--redis-url", e.o.redisURL)
		}
	case "goka":
		bin = e.o.gokaBin
		args = []string{"goka-throughput", "--brokers", strings.Join(e.o.brokers, ","), "--group", appID,
			"--input", e.input, "--output", output, "--storage", dir, "--http-addr", addr, "--instance-id", "goka-0"}
		repartition = appID + "-loop"
	case "kstreams-alos", "kstreams-eos":
		guarantee := "at_least_once"
		if s == "kstreams-eos" {
			guarantee = "exactly_once_v2"
		}
		bin = e.o.java
		args = append(strings.Fields(e.o.javaOpts), "-jar", e.o.jar, "--bootstrap-servers", strings.Join(e.o.brokers, ","),
			"--application-id", appID, "--input-topic", e.input, "--output-topic", output,
			"--processing-guarantee", guarantee, "--instance-id", "ks-0", "--state-dir", dir,
			"--commit-interval-ms", fmt.Sprint(ci.Milliseconds()))
	}
	// Kafka Streams and goka do not create sink topics, and the broker
	// does not auto-create them.
	if err := createTopic(e.o.brokers, output, int32(e.o.partitions)); err != nil {
		return m, err
	}
	child, err := bench.StartChild(filepath.Join(e.o.work, appID+".log"), bin, args...)
	if err != nil {
		return m, err
	}
	defer child.Kill()
	wctx, cancel := context.WithTimeout(ctx, e.o.timeout)
	defer cancel()
	type res struct {
		r   bench.DrainResult
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := bench.DrainWatch{Brokers: e.o.brokers, Group: appID, Stages: [][]string{{e.input}, {repartition}}}.Wait(wctx)
		done <- res{r, err}
	}()
	var d res
	for d.r.At.IsZero() && d.err == nil {
		select {
		case d = <-done:
		case <-time.After(200 * time.Millisecond):
			if child.Exited() {
				cancel()
				<-done
				return m, child.Failed(fmt.Errorf("%s exited", s))
			}
		}
	}
	if d.err != nil {
		return m, child.Failed(d.err)
	}
	u, err := child.Usage()
	if err != nil {
		return m, err
	}
	m.seconds = d.r.At.Sub(child.Started).Seconds()
	m.rate = float64(e.o.ratings) / m.seconds
	m.cpu, m.rssMiB = u.CPU.Seconds(), float64(u.PeakRSS)/(1<<20)
	if strings.HasPrefix(s, "keepstate") {
		m.check = e.checkAPI(ctx, "http://"+addr)
	} else {
		obs, err := bench.ScanOutputTopic(ctx, e.o.brokers, output)
		if err != nil {
			return m, err
		}
		m.check = e.truth.Check(obs)
	}
	child.Kill()
	if !e.o.keep {
		_ = os.RemoveAll(dir)
		if err := deleteTopics(e.o.brokers, appID); err != nil {
			fmt.Fprintf(e.out, "  (could not delete the topics of %s: %v)\n", appID, err)
		}
	}
	return m, nil
}

// checkAPI reads every movie through keepstate's API, again for up to 30 s
// while it is not exact (the store is written right after the commit).
func (e *env) checkAPI(ctx context.Context, base string) bench.CheckReport {
	deadline := time.Now().Add(30 * time.Second)
	for {
		obs, err := bench.ScanAPI(ctx, base)
		r := bench.CheckReport{Movies: e.truth.Movies(), Missing: e.truth.Movies()}
		if err == nil {
			r = e.truth.Check(obs)
		}
		if r.OK() || time.Now().After(deadline) || ctx.Err() != nil {
			return r
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// median of xs (not empty).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// summarize renders the Markdown table of medians, with each system's
// throughput relative to the first system measured.
func summarize(o options, results map[string][]measurement) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Medians of %d interleaved runs (min–max), load average at the end %s:\n\n", o.runs, machine.LoadAvg())
	b.WriteString("| system | ratings/s | vs " + o.systems[0] + " | CPU s | CPU µs per rating | peak RSS MiB | exact |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	base := 0.0
	for i, s := range o.systems {
		ms := results[s]
		if len(ms) == 0 {
			continue
		}
		var rate, cpu, rss []float64
		exact := "all runs"
		for j, m := range ms {
			rate, cpu, rss = append(rate, m.rate), append(cpu, m.cpu), append(rss, m.rssMiB)
			if !m.check.OK() {
				exact = fmt.Sprintf("run %d: %s", j+1, m.check)
			}
		}
		r := median(rate)
		if i == 0 {
			base = r
		}
		fmt.Fprintf(&b, "| %s | %.1fk (%.1f–%.1fk) | %.2f× | %.1f | %.1f | %.0f | %s |\n", s, r/1000,
			slices.Min(rate)/1000, slices.Max(rate)/1000, r/base, median(cpu), median(cpu)/float64(o.ratings)*1e6, median(rss), exact)
	}
	return b.String()
}
