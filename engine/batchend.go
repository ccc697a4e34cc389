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
// such empty batches from RecordsSet, and a fetch can return nothing else,
// so a reader that only looks at RecordsSet fetches the same offset
// forever. sarama's PartitionConsumer steps past them with the unexported
// FetchResponseBlock.recordsNextOffset, which this reads by reflection;
// TestCommittedReaderStepsOverEmptiedBatches fails if sarama renames it.
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
