package engine

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"testing"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/avro"
)

// benchSerde decodes the 16-byte values of these benchmarks (movie id,
// rating) so that they measure the engine's record building, not Avro.
type benchSerde struct{}

func (benchSerde) DecodeRating(_ context.Context, b []byte) (avro.Rating, error) {
	return avro.Rating{MovieID: int64(binary.BigEndian.Uint64(b)), Rating: 7}, nil
}
func (benchSerde) EncodeCountAndSum(context.Context, string, avro.CountAndSum) ([]byte, error) {
	return make([]byte, 14), nil
}
func (benchSerde) DecodeCountAndSum(context.Context, []byte) (avro.CountAndSum, error) {
	return avro.CountAndSum{}, nil
}

func benchEngine() *Engine {
	cfg := DefaultConfig()
	job, err := MovieJob(benchSerde{}).Runner()
	if err != nil {
		panic(err)
	}
	return &Engine{cfg: cfg, topics: cfg.Topics(), job: job, nParts: 3, nOut: 3, nDLQ: 3,
		route: newRouter(cfg, slog.New(slog.NewTextHandler(io.Discard, nil))), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// BenchmarkForward is the rekey stage's per-record work: one drained batch
// of input records turned into repartition records.
func BenchmarkForward(b *testing.B) {
	e := benchEngine()
	batch := make([]*sarama.ConsumerMessage, maxDrain)
	for i := range batch {
		v := binary.BigEndian.AppendUint64(nil, uint64(i%62000))
		batch[i] = &sarama.ConsumerMessage{Topic: "ratings", Partition: 1, Offset: int64(1_000_000 + i), Value: append(v, 0, 0, 0, 0, 0, 0, 0, 0)}
	}
	f := newForwarder()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		out, _, err := e.forward(context.Background(), f, batch)
		if err != nil || len(out) != len(batch) {
			b.Fatalf("forward: %d records, %v", len(out), err)
		}
		f.reset() // as the rekey stage does once sarama returned the records
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/record")
}

// BenchmarkSourceOf is the aggregate stage reading a repartition record's
// input position.
func BenchmarkSourceOf(b *testing.B) {
	hs := []*sarama.RecordHeader{
		{Key: []byte(HeaderSourcePartition), Value: []byte("2")},
		{Key: []byte(HeaderSourceOffset), Value: []byte("123456789")},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, off, ok, err := sourceOf(hs); !ok || err != nil || off != 123456789 {
			b.Fatalf("sourceOf = %d %v %v", off, ok, err)
		}
	}
}

// BenchmarkFlushRecords builds the changelog and average records of a
// flush of 2000 documents.
func BenchmarkFlushRecords(b *testing.B) {
	e := benchEngine()
	docs := make([]Doc, maxDrain)
	aggs := make([]Agg, maxDrain)
	for i := range docs {
		docs[i] = movieDoc(MovieStats{MovieID: int64(i), Partition: 1, Count: 10, Sum: 70, Version: 5_000_000, Sources: map[int32]int64{0: 1_000_000, 1: 2_000_000, 2: 3_000_000}})
		a, err := e.job.DecodeValue(context.Background(), docs[i].Value)
		if err != nil {
			b.Fatal(err)
		}
		aggs[i] = a
	}
	b.ReportAllocs()
	for b.Loop() {
		a := newRecordArena(2*len(docs), 2)
		for i, d := range docs {
			if _, err := e.changelogRecord(context.Background(), d, aggs[i], a); err != nil {
				b.Fatal(err)
			}
			e.outputRecord(d.Key, aggs[i], a)
		}
	}
}
