package docstore

import (
	"context"
	"encoding/binary"
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

// benchMovie is movie id at version as the movie job stores it in a
// table (movieTableDoc), with a count and an average drawn from a hash of
// both (averages on a 0.05 grid in [0, 10]).
func benchMovie(id int64, p int32, version int64) engine.Doc {
	h := uint64(id)*0x9E3779B97F4A7C15 + uint64(version)*0xBF58476D1CE4E5B9
	h ^= h >> 31
	count := int64(h%20) + 1
	avg := float64((h>>8)%201) / 20
	return movieTableDoc(id, p, version, count, avg*float64(count))
}

// movieTableDoc is a movie as the movie job stores it in a table: a
// 16-byte value (count, sum) and its average as the one index value.
func movieTableDoc(id int64, p int32, version, count int64, sum float64) engine.Doc {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(count))
	v = binary.BigEndian.AppendUint64(v, math.Float64bits(sum))
	return engine.Doc{Key: movies.Key(id), Partition: p, Version: version,
		Sources: map[int32]int64{p: version}, Value: v, Index: []engine.IndexValue{engine.Num(sum / float64(count))}}
}

// restoreLog calls fn with the replay batches of a full restore of movies
// 1..n over 3 partitions: 5000 documents each (engine/restore.go), one
// partition after another, version 1 of every movie (benchMovie); movie
// id is in partition (id-1)%3.
func restoreLog(n int, fn func(engine.DocBatch) error) error {
	const parts, size = 3, 5000
	for p := range int32(parts) {
		var docs []engine.Doc
		var cp int64
		for id := int64(p) + 1; id <= int64(n); id += parts {
			docs = append(docs, benchMovie(id, p, 1))
			cp++
			if len(docs) == size || id+parts > int64(n) {
				if err := fn(engine.DocBatch{Partition: p, Docs: docs, Checkpoint: cp, Replay: true}); err != nil {
					return err
				}
				docs = nil
			}
		}
	}
	return nil
}

// restoreTable replays restoreLog(n) into tb, a table of the movie job's
// spec (claiming each partition first).
func restoreTable(ctx context.Context, tb engine.Table, n int) error {
	epochs := map[int32]int64{}
	return restoreLog(n, func(b engine.DocBatch) error {
		if _, ok := epochs[b.Partition]; !ok {
			e, err := tb.Claim(ctx, b.Partition)
			if err != nil {
				return err
			}
			epochs[b.Partition] = e
		}
		b.Epoch = epochs[b.Partition]
		return tb.Apply(ctx, b)
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
// benchDocs movies (replay batches of 5000) into an empty table of the
// movie job's spec (movies.Spec), then on that table key lookups, top-100
// queries and 1000-document uniform batches (fsync on), and the disk
// used. The variant readpath (no bulk load: every replay batch reads
// before it writes) measures the restore alone, in a store of its own:
//
//	go test -run '^$' -bench BenchmarkEngines -benchtime 1x -timeout 30m ./docstore
func BenchmarkEngines(b *testing.B) {
	n := benchDocs()
	ctx := context.Background()
	engines := []struct {
		name string
		opts []Option
	}{
		{"table", nil},
		{"readpath", []Option{withoutBulkLoad()}},
	}
	for _, eng := range engines {
		dir := filepath.Join(b.TempDir(), eng.name)
		open := func(b *testing.B) (*Store, engine.Table) {
			s, err := Open(dir, eng.opts...)
			if err != nil {
				b.Fatal(err)
			}
			return s, mustTable(b, s, movies.Spec)
		}
		b.Run(eng.name+"/restore", func(b *testing.B) {
			for b.Loop() {
				_ = os.RemoveAll(dir)
				s, tb := open(b)
				start, cpu0 := time.Now(), cpuTime()
				if err := restoreTable(ctx, tb, n); err != nil {
					b.Fatal(err)
				}
				// A read writes out what the bulk load still buffers.
				if _, ok, err := tb.Checkpoint(ctx, 2); err != nil || !ok {
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
		if eng.name != "table" {
			continue
		}
		b.Run(eng.name+"/get", func(b *testing.B) {
			s, tb := open(b)
			defer s.Close()
			r := rand.New(rand.NewPCG(1, 1))
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := tb.Get(ctx, movies.Key(1+r.Int64N(int64(n)))); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportLatency(b, lat, "µs", time.Microsecond)
		})
		b.Run(eng.name+"/top100-minAvg8", func(b *testing.B) {
			s, tb := open(b)
			defer s.Close()
			q := engine.IndexQuery{Index: "avg", Min: engine.Num(8), HasMin: true, Desc: true, Limit: 100}
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				page, err := tb.Query(ctx, q)
				if err != nil || len(page.Docs) != 100 {
					b.Fatalf("query = %d documents, %v", len(page.Docs), err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportLatency(b, lat, "ms", time.Millisecond)
		})
		b.Run(eng.name+"/apply-1000", func(b *testing.B) {
			s, tb := open(b)
			defer s.Close()
			epoch, err := tb.Claim(ctx, 0)
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
				batch := make([]engine.Doc, 0, 1000)
				for len(batch) < 1000 {
					id := 3*r.Int64N(int64(n/3)) + 1 // partition 0's ids (restoreLog)
					if seen[id] {
						continue
					}
					seen[id] = true
					batch = append(batch, benchMovie(id, 0, version))
				}
				b.StartTimer()
				t0 := time.Now()
				if err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: batch, Checkpoint: int64(n)}); err != nil {
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
