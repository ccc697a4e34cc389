package storebench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/boltstore"
)

// benchGetDuringApply looks up random movies while another goroutine
// applies 1000-document uniform batches to the same store without pause
// (fsync on): the lookup latency a query sees while the store writes and
// compacts. It reports the lookups' p50/p99 and the applies' docs/s.
func benchGetDuringApply(b *testing.B, t target) {
	s := t.open(b)
	ctx, cancel := context.WithCancel(context.Background())
	var epochs [partitions]int64
	for p := range int32(partitions) {
		e, err := s.Claim(ctx, p)
		if err != nil {
			b.Fatalf("claim partition %d: %v", p, err)
		}
		epochs[p] = e
	}
	r := rng(b)
	pk := uniformPicker(fix.n, rng(b))
	var (
		wg      sync.WaitGroup
		applied int
		applyT  time.Duration
		werr    error
	)
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			p := int32(i % partitions)
			ids, _, err := pk.ids(p, 1000)
			if err != nil {
				werr = err
				return
			}
			batch := t.w.batch(p, epochs[p], ids)
			t0 := time.Now()
			if err := s.Apply(context.Background(), batch); err != nil {
				werr = err
				return
			}
			applyT += time.Since(t0)
			applied += len(ids)
		}
	})
	var lat samples
	for b.Loop() {
		id := 1 + r.Int64N(int64(fix.n))
		t0 := time.Now()
		m, err := s.Get(context.Background(), id)
		lat = append(lat, time.Since(t0))
		if err != nil || m.MovieID != id {
			cancel()
			wg.Wait()
			b.Fatalf("Get(%d) = movie %d, %v", id, m.MovieID, err)
		}
		if len(lat)%64 == 0 {
			time.Sleep(time.Millisecond) // a query load, not a busy loop starving the writer of CPU
		}
	}
	cancel()
	wg.Wait()
	if werr != nil {
		b.Fatalf("background applies: %v", werr)
	}
	lat.report(b)
	if applyT > 0 {
		b.ReportMetric(float64(applied)/applyT.Seconds(), "apply-docs/s")
	}
}

// benchReopen closes nothing it did not open: it opens a second Store on
// the data directory (none is open), asks one Get, and closes it; the time
// to the answer is reported.
func benchReopen(b *testing.B, t target) {
	id := int64(fix.n / 2)
	var lat samples
	for b.Loop() {
		t0 := time.Now()
		s, err := t.fresh()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Get(context.Background(), id); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(lat.percentile(0.5).Microseconds())/1e3, "p50-ms")
}

// rssEnv names the store a child process measures (rssChild).
const rssEnv = "KEEPSTATE_STOREBENCH_RSS"

// benchRSS runs rssChild in a fresh process on the store's directory and
// reports its peak and final resident set size: the store's memory at 1M
// documents after lookups, queries and applies, with nothing else in the
// process.
func benchRSS(b *testing.B, t target) {
	dir := map[string]string{"bbolt": fix.bboltDir, "clover": fix.cloverDir}[t.name]
	for b.Loop() {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRSSChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), rssEnv+"="+t.name+":"+dir+":"+strconv.Itoa(fix.n))
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("rss child: %v: %s", err, out)
		}
		var hwm, rss float64
		if _, err := fmt.Sscanf(lastLine(string(out), "rss "), "rss hwm=%f rss=%f", &hwm, &rss); err != nil {
			b.Fatalf("rss child said %q: %v", out, err)
		}
		b.ReportMetric(hwm, "peak-MiB")
		b.ReportMetric(rss, "rss-MiB")
	}
}

func lastLine(out, prefix string) string {
	var found string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			found = line
		}
	}
	return found
}

// TestRSSChild is the body of benchRSS's child process; it skips when run
// as a test.
func TestRSSChild(t *testing.T) {
	spec := os.Getenv(rssEnv)
	if spec == "" {
		t.Skip("child process of BenchmarkStores/rss")
	}
	parts := strings.SplitN(spec, ":", 3)
	n, _ := strconv.Atoi(parts[2])
	var (
		s   engine.Store
		err error
	)
	switch parts[0] {
	case "clover":
		var ds *docstore.Store
		if ds, err = docstore.Open(parts[1]); err == nil {
			<-ds.Warmed() // the write cache is part of its memory
			s = ds
		}
	case "bbolt":
		s, err = boltstore.Open(parts[1])
	default:
		err = errors.New("unknown store " + parts[0])
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := range 20_000 {
		id := 1 + int64(i)*7919%int64(n)
		if _, err := s.Get(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 {
		if _, err := s.Range(ctx, engine.RangeQuery{MinAvg: 8, MaxAvg: 10, Limit: 100}); err != nil {
			t.Fatal(err)
		}
	}
	version := time.Now().UnixNano() // newer than anything stored
	for k := range 30 {
		p := int32(k % partitions)
		e, err := s.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		docs := make([]engine.MovieStats, 0, 1000)
		for i := range 1000 {
			id := int64(p) + int64(partitions)*(1+int64((k*1000+i)*104729%(n/partitions-1)))
			m := movie(id, version)
			docs = append(docs, m)
		}
		version++
		if err := s.Apply(ctx, engine.Batch{Partition: p, Epoch: e, Docs: dedupe(docs), Checkpoint: 1 << 40}); err != nil {
			t.Fatal(err)
		}
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	var hwm, rss float64
	for line := range strings.SplitSeq(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "VmHWM:" {
			hwm, _ = strconv.ParseFloat(f[1], 64)
		}
		if len(f) >= 2 && f[0] == "VmRSS:" {
			rss, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	fmt.Printf("rss hwm=%.1f rss=%.1f\n", hwm/1024, rss/1024)
}

// dedupe keeps the first document of each movie.
func dedupe(docs []engine.MovieStats) []engine.MovieStats {
	seen := map[int64]bool{}
	out := docs[:0]
	for _, m := range docs {
		if !seen[m.MovieID] {
			seen[m.MovieID] = true
			out = append(out, m)
		}
	}
	return out
}
