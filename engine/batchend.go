package engine

import (
	"reflect"

	"github.com/IBM/sarama"
)

// batchesEnd returns the offset after the last record batch the broker
// returned in b, counting batches that hold no records, and false when
// sarama did not record it.
//
// Log compaction keeps the header of a producer's last batch after removing
// all its records (Kafka preserves producer state that way). sarama drops
// such empty batches from RecordsSet, and a segment's read can return
// nothing else, so a reader that only looks at RecordsSet fetches the same
// offset forever: a restore on Apache Kafka failed after 101 fetches at one
// offset with 68 records above it. sarama's own PartitionConsumer steps past
// them with FetchResponseBlock.recordsNextOffset, which it does not export;
// this reads that field. TestCommittedReaderStepsOverEmptiedBatches fails if a sarama
// upgrade renames it.
func batchesEnd(b *sarama.FetchResponseBlock) (int64, bool) {
	if b == nil {
		return 0, false
	}
	f := reflect.ValueOf(b).Elem().FieldByName("recordsNextOffset")
	if !f.IsValid() || f.Kind() != reflect.Pointer || f.IsNil() || f.Elem().Kind() != reflect.Int64 {
		return 0, false
	}
	return f.Elem().Int(), true
}
