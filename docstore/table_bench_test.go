package docstore

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// benchTableDocs is the size of the benchmark tables;
// KEEPSTATE_BENCH_TABLE_DOCS overrides it.
func benchTableDocs() int {
	if n, err := strconv.Atoi(os.Getenv("KEEPSTATE_BENCH_TABLE_DOCS")); err == nil && n > 0 {
		return n
	}
	return 100_000
}

// benchTable opens a store (fsync as given) with the orders table filled
// with benchTableDocs documents.
func benchTable(b *testing.B, fsync bool) (*Store, *table, int) {
	b.Helper()
	n := benchTableDocs()
	s := openTemp(b, WithFsync(fsync))
	b.Cleanup(func() { _ = s.Close() })
	tb := mustTable(b, s, ordersSpec)
	fillTable(b, tb, n, 5000)
	return s, tb, n
}

// BenchmarkTableApply measures Apply of 1000-document batches on a table
// of benchTableDocs documents: updates of random existing keys (every
// index entry moves) and inserts of new keys, with fsync off and on
// (one synced batch per op), and replay batches. ns/doc is per document.
func BenchmarkTableApply(b *testing.B) {
	const batch = 1000
	for _, bc := range []struct {
		name          string
		fsync, insert bool
		replay        bool
	}{
		{"update", false, false, false},
		{"insert", false, true, false},
		{"update-fsync", true, false, false},
		{"insert-fsync", true, true, false},
		{"replay-update-fsync", true, false, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, tb, n := benchTable(b, bc.fsync)
			ctx := context.Background()
			epoch, err := tb.Claim(ctx, 0)
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			version, next := int64(2), n
			docs := make([]engine.Doc, batch)
			for b.Loop() {
				b.StopTimer()
				for i := range docs {
					version++ // a key drawn twice is newer the second time
					if bc.insert {
						docs[i] = orderDoc(next, 0, version)
						next++
					} else {
						docs[i] = orderDoc(rng.IntN(n), 0, version)
					}
				}
				b.StartTimer()
				err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: version, Replay: bc.replay})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/doc")
		})
	}
}

// BenchmarkTableLoad measures Load of 100 random keys (one iterator
// seeking them in order) and Get of one, on a table of benchTableDocs
// documents.
func BenchmarkTableLoad(b *testing.B) {
	_, tb, n := benchTable(b, false)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	b.Run("load100", func(b *testing.B) {
		keys := make([][]byte, 100)
		for b.Loop() {
			for i := range keys {
				keys[i] = orderDoc(rng.IntN(n), 0, 1).Key
			}
			docs, err := tb.Load(ctx, keys)
			if err != nil || len(docs) == 0 {
				b.Fatal(len(docs), err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/doc")
	})
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			if _, err := tb.Get(ctx, orderDoc(rng.IntN(n), 0, 1).Key); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTableQuery measures a page of 10 on a table of benchTableDocs
// documents: the top of the number index, a bounded range of it deep in
// the order, and an equality on the string index, descending.
func BenchmarkTableQuery(b *testing.B) {
	_, tb, _ := benchTable(b, false)
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		q    engine.IndexQuery
	}{
		{"number-top", engine.IndexQuery{Index: "total", Desc: true}},
		{"number-range", engine.IndexQuery{Index: "total", Min: engine.Num(50), HasMin: true, Max: engine.Num(60), HasMax: true}},
		{"string-equal-desc", engine.IndexQuery{Index: "tier", Min: engine.Str("gold"), HasMin: true, Max: engine.Str("gold"), HasMax: true, Desc: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			q := bc.q
			q.Limit = 10
			for b.Loop() {
				page, err := tb.Query(ctx, q)
				if err != nil || len(page.Docs) != 10 {
					b.Fatal(len(page.Docs), err)
				}
			}
		})
	}
}

// BenchmarkTableQueryTiesDesc measures a page of 1000, descending, on a
// TiesAscending table of 20,000 documents with nearly distinct values
// (running averages): the whole page, and the page of one partition in
// three (an instance's own among its standbys' documents).
func BenchmarkTableQueryTiesDesc(b *testing.B) {
	const n, parts = 20_000, 3
	s := openTemp(b, WithFsync(false))
	b.Cleanup(func() { _ = s.Close() })
	tb := mustTable(b, s, moviesSpec)
	ctx := context.Background()
	epoch, err := tb.Claim(ctx, 0)
	if err != nil {
		b.Fatal(err)
	}
	docs := make([]engine.Doc, 0, n)
	for i := range n {
		k := []byte(strconv.Itoa(i))
		docs = append(docs, engine.Doc{Key: k, Partition: 0, Version: 1, Sources: map[int32]int64{0: 1},
			Value: []byte(`{}`), Index: []engine.IndexValue{engine.Num(float64(i%997) + float64(i)/n)}})
	}
	if err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: docs, Checkpoint: 1}); err != nil {
		b.Fatal(err)
	}
	q := engine.IndexQuery{Index: "avg", Desc: true, Limit: 1000}
	for _, bc := range []struct {
		name string
		keep func([]byte) bool
	}{
		{"all", nil},
		{"one-partition-in-three", func(k []byte) bool { return engine.PartitionFor(k, parts) == 0 }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				page, err := tb.QueryFiltered(ctx, q, bc.keep)
				if err != nil || len(page.Docs) != q.Limit {
					b.Fatal(len(page.Docs), err)
				}
			}
		})
	}
}
