package docstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// benchDocs is the size of the benchmark stores; KEEPSTATE_BENCH_DOCS
// overrides it (for a quick look).
func benchDocs() int {
	if n, err := strconv.Atoi(os.Getenv("KEEPSTATE_BENCH_DOCS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// restoreLog calls fn with the replay batches of a full restore of movies
// 1..n over 3 partitions: 5000 documents each (engine/restore.go), one
// partition after another, version 1 of every movie.
func restoreLog(n int, fn func(engine.Batch) error) error {
	const parts, size = 3, 5000
	for p := range int32(parts) {
		var docs []engine.MovieStats
		var cp int64
		for id := int64(p) + 1; id <= int64(n); id += parts {
			m := syntheticMovie(id, 1)
			m.Partition = p
			docs = append(docs, m)
			cp++
			if len(docs) == size || id+parts > int64(n) {
				if err := fn(engine.Batch{Partition: p, Docs: docs, Checkpoint: cp, Replay: true}); err != nil {
					return err
				}
				docs = nil
			}
		}
	}
	return nil
}

// restore replays restoreLog(n) into s (claiming each partition first).
func restore(ctx context.Context, s *Store, n int) error {
	epochs := map[int32]int64{}
	return restoreLog(n, func(b engine.Batch) error {
		if _, ok := epochs[b.Partition]; !ok {
			e, err := s.Claim(ctx, b.Partition)
			if err != nil {
				return err
			}
			epochs[b.Partition] = e
		}
		b.Epoch = epochs[b.Partition]
		return s.Apply(ctx, b)
	})
}

// restoreTable replays restoreLog(n) into a table of the movie job's
// spec (claiming each partition first), as the movie job's documents
// (movieTableDoc).
func restoreTable(ctx context.Context, tb engine.Table, n int) error {
	epochs := map[int32]int64{}
	return restoreLog(n, func(b engine.Batch) error {
		if _, ok := epochs[b.Partition]; !ok {
			e, err := tb.Claim(ctx, b.Partition)
			if err != nil {
				return err
			}
			epochs[b.Partition] = e
		}
		docs := make([]engine.Doc, len(b.Docs))
		for i, m := range b.Docs {
			docs[i] = movieTableDoc(m.MovieID, b.Partition, m.Version, m.Count, m.Sum)
		}
		return tb.Apply(ctx, engine.DocBatch{Partition: b.Partition, Epoch: epochs[b.Partition], Docs: docs,
			Checkpoint: b.Checkpoint, Replay: true})
	})
}

// diskBytes returns the bytes the files under dir occupy on disk.
func diskBytes(dir string) int64 {
	var blocks int64
	_ = filepath.WalkDir(dir, func(_ string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if fi, err := e.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					blocks += st.Blocks
				}
			}
		}
		return nil
	})
	return blocks * 512
}

// BenchmarkEngines measures the store on Pebble: a full restore of
// benchDocs movies (replay batches of 5000, fsync on) into an empty store,
// then on that store key lookups, top-100 queries and 1000-document
// uniform batches (fsync on), and the disk used. The variants batches
// (bulk loads through write batches instead of ingested files), readpath
// (no bulk load: every replay batch reads before it writes) and table
// (the same documents restored into a table of the movie job's spec,
// movies.Spec, as movieTableDoc) measure the restore alone, each in
// a store of its own:
//
//	go test -run '^$' -bench BenchmarkEngines -benchtime 1x -timeout 30m ./docstore
func BenchmarkEngines(b *testing.B) {
	n := benchDocs()
	ctx := context.Background()
	engines := []struct {
		name  string
		opts  []Option
		table bool
	}{
		{"pebble", nil, false},
		{"table", nil, true},
		{"batches", []Option{withoutIngest()}, false},
		{"readpath", []Option{withoutBulkLoad()}, false},
	}
	for _, eng := range engines {
		dir := filepath.Join(b.TempDir(), eng.name)
		open := func(b *testing.B) *Store {
			s, err := Open(dir, eng.opts...)
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
		b.Run(eng.name+"/restore", func(b *testing.B) {
			for b.Loop() {
				_ = os.RemoveAll(dir)
				s := open(b)
				start, cpu0 := time.Now(), cpuTime()
				// A read writes out what the bulk load still buffers.
				checkpoint := s.Checkpoint
				if eng.table {
					tb := mustTable(b, s, movies.Spec)
					if err := restoreTable(ctx, tb, n); err != nil {
						b.Fatal(err)
					}
					checkpoint = tb.Checkpoint
				} else if err := restore(ctx, s, n); err != nil {
					b.Fatal(err)
				}
				if _, ok, err := checkpoint(ctx, 2); err != nil || !ok {
					b.Fatalf("checkpoint after the restore: %v, %v", ok, err)
				}
				took, cpu := time.Since(start), cpuTime()-cpu0
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(n)/took.Seconds(), "docs/s")
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(n)/1e3, "cpu-µs/doc")
				b.ReportMetric(float64(diskBytes(dir))/(1<<20), "disk-MiB")
			}
		})
		if eng.name != "pebble" {
			continue
		}
		b.Run(eng.name+"/get", func(b *testing.B) {
			s := open(b)
			defer s.Close()
			r := rand.New(rand.NewPCG(1, 1))
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := s.Get(ctx, 1+r.Int64N(int64(n))); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportLatency(b, lat, "µs", time.Microsecond)
		})
		b.Run(eng.name+"/top100-minAvg8", func(b *testing.B) {
			s := open(b)
			defer s.Close()
			q := engine.RangeQuery{MinAvg: 8, MaxAvg: math.Inf(1), Limit: 100}
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				page, err := s.Range(ctx, q)
				if err != nil || len(page.Movies) != 100 {
					b.Fatalf("range = %d movies, %v", len(page.Movies), err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportLatency(b, lat, "ms", time.Millisecond)
		})
		b.Run(eng.name+"/apply-1000", func(b *testing.B) {
			s := open(b)
			defer s.Close()
			epoch, err := s.Claim(ctx, 0)
			if err != nil {
				b.Fatal(err)
			}
			r := rand.New(rand.NewPCG(2, 2))
			version := int64(1)
			var busy time.Duration
			docs := 0
			cpu0 := cpuTime()
			for b.Loop() {
				b.StopTimer()
				version++
				seen := map[int64]bool{}
				batch := make([]engine.MovieStats, 0, 1000)
				for len(batch) < 1000 {
					id := 3 * (1 + r.Int64N(int64(n/3)-1)) // partition 0's ids: multiples of 3, stored as id-2
					id -= 2
					if seen[id] {
						continue
					}
					seen[id] = true
					m := syntheticMovie(id, version)
					m.Partition = 0
					batch = append(batch, m)
				}
				b.StartTimer()
				t0 := time.Now()
				if err := s.Apply(ctx, engine.Batch{Partition: 0, Epoch: epoch, Docs: batch, Checkpoint: int64(n)}); err != nil {
					b.Fatal(err)
				}
				busy += time.Since(t0)
				docs += len(batch)
			}
			b.ReportMetric(float64(docs)/busy.Seconds(), "docs/s")
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(docs)/1e3, "cpu-µs/doc")
		})
	}
}

// reportLatency reports p50 and p99 of lat in unit.
func reportLatency(b *testing.B, lat []time.Duration, unit string, per time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	for _, q := range []float64{0.5, 0.99} {
		v := lat[min(len(lat)-1, int(q*float64(len(lat))))]
		b.ReportMetric(float64(v)/float64(per), fmt.Sprintf("p%.0f-%s", q*100, unit))
	}
}

// cpuTime returns the CPU time (user and system) this process has used:
// on a shared machine it moves less with the load than wall time does, and
// it includes the engine's background compactions.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
