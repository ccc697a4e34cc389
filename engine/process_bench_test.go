package engine

import (
	"context"
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/IBM/sarama"
)

// BenchmarkProcess is the aggregate stage applying drained batches of
// repartition records to a task's cache (store reads miss; no flush).
func BenchmarkProcess(b *testing.B) {
	e := benchEngine()
	e.table = nullTable{}
	batches := processBatches(100)
	var t *task
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%len(batches) == 0 {
			b.StopTimer()
			t = &task{e: e, cache: newDocCache(true), next: -1, committed: -1}
			b.StartTimer()
		}
		if err := t.process(context.Background(), batches[i%len(batches)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*maxDrain), "ns/record")
}

// nullTable is a Table without documents: every Load misses.
type nullTable struct{}

func (nullTable) Spec() TableSpec                                        { return benchJob().Spec() }
func (nullTable) Claim(context.Context, int32) (int64, error)            { return 1, nil }
func (nullTable) Checkpoint(context.Context, int32) (int64, bool, error) { return 0, false, nil }
func (nullTable) Load(context.Context, [][]byte) (map[string]Doc, error) { return nil, nil }
func (nullTable) Apply(context.Context, DocBatch) error                  { return nil }
func (nullTable) DropPartition(context.Context, int32) error             { return nil }
func (nullTable) Get(context.Context, []byte) (Doc, error)               { return Doc{}, ErrNotFound }
func (nullTable) Query(context.Context, IndexQuery) (DocPage, error)     { return DocPage{}, nil }

// processBatches are repartition records of a skewed workload: 2000-record
// batches over 5000 movies, with their input position in headers.
func processBatches(n int) [][]*sarama.ConsumerMessage {
	out := make([][]*sarama.ConsumerMessage, n)
	off := int64(0)
	for i := range out {
		batch := make([]*sarama.ConsumerMessage, maxDrain)
		for j := range batch {
			id := int64((j*j + i*7919) % 5000)
			v := binary.BigEndian.AppendUint64(nil, uint64(id))
			batch[j] = &sarama.ConsumerMessage{Topic: "r", Partition: 0, Offset: off, Key: int64Key(id), Value: append(v, 0, 0, 0, 0, 0, 0, 0, 0),
				Headers: []*sarama.RecordHeader{
					{Key: []byte(HeaderSourcePartition), Value: []byte("1")},
					{Key: []byte(HeaderSourceOffset), Value: []byte(strconv.FormatInt(off, 10))},
				}}
			off++
		}
		out[i] = batch
	}
	return out
}
