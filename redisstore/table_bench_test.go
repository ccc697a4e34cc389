package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// The table benchmarks share one table of benchTableDocs documents on the
// shared redis-server, loaded by the first benchmark that needs it.
var benchTable struct {
	mu    sync.Mutex
	s     *Store
	tb    *table
	ties  *table
	ready bool
}

const (
	benchTableDocs  = 200_000
	benchTableParts = 8
)

// benchKey is the key of document i: a customer-like id.
func benchKey(i int) []byte { return []byte("customer-" + strconv.Itoa(i)) }

// benchDoc is document i at version: a 40-byte value, a total with about
// 1,000 ties per value and a tier of 16 values.
func benchDoc(i int, version int64) engine.Doc {
	p := int32(i % benchTableParts)
	return engine.Doc{Key: benchKey(i), Partition: p, Version: version,
		Sources: map[int32]int64{p: version}, Value: fmt.Appendf(nil, "%040d", i*7+int(version)),
		Index: []engine.IndexValue{engine.Num(float64((i * 31) % 200)), engine.Str("tier-" + strconv.Itoa(i%16))}}
}

// loadBenchTable writes documents 0..n-1 to tb at version, 1000 per batch,
// one goroutine per partition.
func loadBenchTable(ctx context.Context, tb *table, n int, version int64) error {
	errs := make(chan error, benchTableParts)
	for p := range int32(benchTableParts) {
		go func() {
			e, err := tb.Claim(ctx, p)
			if err != nil {
				errs <- err
				return
			}
			batch := make([]engine.Doc, 0, batchSize)
			for i := int(p); i < n; i += benchTableParts {
				batch = append(batch, benchDoc(i, version))
				if len(batch) == batchSize || i+benchTableParts >= n {
					if err := tb.Apply(ctx, engine.DocBatch{Partition: p, Epoch: e, Docs: batch, Checkpoint: int64(i)}); err != nil {
						errs <- err
						return
					}
					batch = batch[:0]
				}
			}
			errs <- nil
		}()
	}
	for range benchTableParts {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// sharedTables returns the loaded benchmark tables (without and with
// TiesAscending).
func sharedTables(b *testing.B) (*table, *table) {
	b.Helper()
	r := sharedRedis(b)
	benchTable.mu.Lock()
	defer benchTable.mu.Unlock()
	if benchTable.ready {
		return benchTable.tb, benchTable.ties
	}
	ctx := context.Background()
	s, err := Open(ctx, r.URL(), WithPrefix(uniquePrefix()))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	ties := orderSpec
	ties.Name, ties.TiesAscending = "ranked", true
	var tbs [2]*table
	for i, spec := range []engine.TableSpec{orderSpec, ties} {
		tb, err := s.OpenTable(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		tbs[i] = tb.(*table)
		if err := loadBenchTable(ctx, tbs[i], benchTableDocs, 1); err != nil {
			b.Fatal(err)
		}
	}
	used, _ := s.client.Info(ctx, "memory").Result()
	b.Logf("loaded 2 tables of %d documents in %v; %s", benchTableDocs, time.Since(start).Round(time.Millisecond), usedMemory(used))
	benchTable.s, benchTable.tb, benchTable.ties, benchTable.ready = s, tbs[0], tbs[1], true
	return tbs[0], tbs[1]
}

// BenchmarkTableApply applies 1000-document batches of updates (every
// document already stored, so its index members move); one op is one
// document.
func BenchmarkTableApply(b *testing.B) {
	r := sharedRedis(b)
	ctx := context.Background()
	s, err := Open(ctx, r.URL(), WithPrefix(uniquePrefix()))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	tb := openTable(b, s, orderSpec)
	defer func() { _ = tb.Reset(ctx) }()
	const docs = 50_000
	if err := loadBenchTable(ctx, tb, docs, 1); err != nil {
		b.Fatal(err)
	}
	e, err := tb.Claim(ctx, 0)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]engine.Doc, 0, batchSize)
	version, next := int64(1), 0
	cpu0 := serverCPU(ctx, s)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(batch) == 0 {
			version++
		}
		batch = append(batch, benchDoc(next, version))
		next = (next + benchTableParts) % docs
		if len(batch) == batchSize || i == b.N-1 {
			if err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: e, Docs: batch, Checkpoint: int64(i)}); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	b.StopTimer() // the deferred Reset is not part of it
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "docs/s")
	reportServerCPU(ctx, b, s, cpu0, b.N)
}

// BenchmarkTableLoad loads 1000 random keys per call (one MULTI/EXEC
// round trip); one op is one document.
func BenchmarkTableLoad(b *testing.B) {
	tb, _ := sharedTables(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([][]byte, 0, batchSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		keys = append(keys, benchKey(rng.IntN(benchTableDocs)))
		if len(keys) == batchSize || i == b.N-1 {
			got, err := tb.Load(ctx, keys)
			if err != nil {
				b.Fatal(err)
			}
			if len(got) == 0 {
				b.Fatal("Load found nothing")
			}
			keys = keys[:0]
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "docs/s")
}

// BenchmarkTableGet reads one random document per op.
func BenchmarkTableGet(b *testing.B) {
	tb, _ := sharedTables(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		if _, err := tb.Get(ctx, benchKey(rng.IntN(benchTableDocs))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTableQuery reads pages of 10 from 200,000 documents: the first
// page of each order, and pages after a random cursor in the middle of a
// run of about 1,000 ties.
func BenchmarkTableQuery(b *testing.B) {
	tb, ties := sharedTables(b)
	ctx := context.Background()
	cases := []struct {
		name   string
		tb     *table
		q      engine.IndexQuery
		cursor bool
	}{
		{"number/asc", tb, engine.IndexQuery{Index: "total", Limit: 10}, false},
		{"number/desc", tb, engine.IndexQuery{Index: "total", Desc: true, Limit: 10}, false},
		{"number/desc/after-cursor", tb, engine.IndexQuery{Index: "total", Desc: true, Limit: 10}, true},
		{"number/range", tb, engine.IndexQuery{Index: "total", Min: engine.Num(50), Max: engine.Num(60),
			HasMin: true, HasMax: true, Limit: 10}, false},
		{"string/asc/after-cursor", tb, engine.IndexQuery{Index: "tier", Limit: 10}, true},
		{"ties-ascending/desc", ties, engine.IndexQuery{Index: "total", Desc: true, Limit: 10}, false},
		{"ties-ascending/desc/after-cursor", ties, engine.IndexQuery{Index: "total", Desc: true, Limit: 10}, true},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			var lat latencies
			for b.Loop() {
				q := bc.q
				if bc.cursor {
					d := benchDoc(rng.IntN(benchTableDocs), 1)
					pos, _, _ := q.Validate(bc.tb.spec)
					q.After = &engine.IndexCursor{Value: d.Index[pos], Key: d.Key}
				}
				start := time.Now()
				page, err := bc.tb.Query(ctx, q)
				lat = append(lat, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if len(page.Docs) == 0 {
					b.Fatalf("Query(%+v) found nothing", q)
				}
			}
			lat.report(b)
		})
	}
}
