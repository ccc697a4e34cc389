package engine

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"math"
	"testing"

	"github.com/IBM/sarama"
)

// benchAgg is the aggregate of the benchmark job: a count and a sum.
type benchAgg struct {
	Count int64
	Sum   float64
}

// benchValues stores a benchAgg as 16 bytes (count, sum bits).
type benchValues struct{}

func (benchValues) Encode(_ context.Context, _ string, a benchAgg) ([]byte, error) {
	return benchValues{}.Append(nil, a), nil
}
func (benchValues) Append(dst []byte, a benchAgg) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.Count))
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(a.Sum))
}
func (benchValues) Decode(_ context.Context, _ string, b []byte) (benchAgg, error) {
	if len(b) != 16 {
		return benchAgg{}, ErrInvalid
	}
	return benchAgg{Count: int64(binary.BigEndian.Uint64(b)), Sum: math.Float64frombits(binary.BigEndian.Uint64(b[8:]))}, nil
}

// benchJob is shaped like the movie job without Avro: records are 16
// bytes (key, rating), so the benchmarks measure the engine's record
// building, not a codec.
func benchJob() Runner {
	job, err := Job[int64, int64, benchAgg]{
		Name:    "bench",
		Decode:  func(_ context.Context, b []byte) (int64, error) { return int64(binary.BigEndian.Uint64(b)), nil },
		Key:     func(k int64) (int64, error) { return k, nil },
		Keys:    Int64Keys,
		Add:     func(a *benchAgg, _ int64) { a.Count++; a.Sum += 7 },
		Values:  benchValues{},
		Indexes: []Index[benchAgg]{NumberIndex("avg", func(a benchAgg) float64 { return a.Sum / float64(max(a.Count, 1)) })},
		Output:  func(dst []byte, a benchAgg) []byte { return appendDouble(dst, a.Sum/float64(max(a.Count, 1))) },
	}.Runner()
	if err != nil {
		panic(err)
	}
	return job
}

func benchEngine() *Engine {
	cfg := DefaultConfig()
	return &Engine{cfg: cfg, topics: cfg.Topics(), job: benchJob(), nParts: 3, nOut: 3, nDLQ: 3,
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
		docs[i] = Doc{Key: int64Key(int64(i)), Partition: 1, Version: 5_000_000, Sources: map[int32]int64{0: 1_000_000, 1: 2_000_000, 2: 3_000_000},
			Value: benchValues{}.Append(nil, benchAgg{Count: 10, Sum: 70}), Index: []IndexValue{Num(7)}}
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

// int64Key returns the Int64Keys encoding of id.
func int64Key(id int64) []byte { return Int64Keys.Append(nil, id) }

func appendDouble(b []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(b, math.Float64bits(v))
}
