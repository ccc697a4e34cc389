package engine

import (
	"encoding/binary"
	"hash"

	"github.com/IBM/sarama"
)

// murmur2Seed is the seed of org.apache.kafka.common.utils.Utils.murmur2.
const murmur2Seed uint32 = 0x9747b28c

// Murmur2 returns the 32-bit MurmurHash2 of b exactly as the Java Kafka
// client computes it (org.apache.kafka.common.utils.Utils.murmur2, seed
// 0x9747b28c), including its sign: the result may be negative. It is pure and
// safe for concurrent use.
func Murmur2(b []byte) int32 {
	const (
		m = uint32(0x5bd1e995)
		r = 24
	)
	n := len(b)
	h := murmur2Seed ^ uint32(n)
	i := 0
	for ; i+4 <= n; i += 4 {
		k := binary.LittleEndian.Uint32(b[i:])
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch n - i {
	case 3:
		h ^= uint32(b[i+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[i+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[i])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// toPositive is org.apache.kafka.common.utils.Utils.toPositive: it clears the
// sign bit (it is not an absolute value).
func toPositive(x int32) int32 { return x & 0x7fffffff }

// PartitionFor returns the partition of a record with the given serialized
// key among numPartitions partitions, as the Java producer's default
// partitioner and Kafka Streams compute it: toPositive(murmur2(key)) %
// numPartitions. numPartitions must be positive; PartitionFor returns -1
// otherwise. It is pure and safe for concurrent use.
func PartitionFor(key []byte, numPartitions int32) int32 {
	if numPartitions <= 0 {
		return -1
	}
	return toPositive(Murmur2(key)) % numPartitions
}

// NewJavaPartitioner returns a sarama partitioner (it has the
// sarama.PartitionerConstructor signature) that places keyed records exactly
// like the Java client: toPositive(murmur2(key bytes)) % partitions. Records
// without a key go to a random partition. RequiresConsistency is true, so
// sarama never moves a keyed record to another partition when its leader is
// unavailable. Each returned partitioner keeps its own hash state and, like
// every sarama partitioner, is used by one goroutine at a time.
func NewJavaPartitioner(topic string) sarama.Partitioner {
	return javaPartitioner(topic)
}

// javaPartitioner relies on sarama's reference-abs mode, which computes
// (int32(hash) & 0x7fffffff) % n, i.e. Java's toPositive, also for negative
// hashes (TestJavaPartitionerMatchesJava covers negative ones).
var javaPartitioner = sarama.NewCustomPartitioner(
	sarama.WithAbsFirst(),
	sarama.WithCustomHashFunction(func() hash.Hash32 { return new(murmur2Hash) }),
)

// murmur2Hash adapts Murmur2 to hash.Hash32. MurmurHash2 mixes the input
// length into its initial state, so the hash buffers what is written and
// computes on Sum32. Not safe for concurrent use.
type murmur2Hash struct{ buf []byte }

var _ hash.Hash32 = (*murmur2Hash)(nil)

func (h *murmur2Hash) Write(p []byte) (int, error) {
	h.buf = append(h.buf, p...)
	return len(p), nil
}

func (h *murmur2Hash) Sum(b []byte) []byte { return binary.BigEndian.AppendUint32(b, h.Sum32()) }
func (h *murmur2Hash) Sum32() uint32       { return uint32(Murmur2(h.buf)) }
func (h *murmur2Hash) Reset()              { h.buf = h.buf[:0] }
func (h *murmur2Hash) Size() int           { return 4 }
func (h *murmur2Hash) BlockSize() int      { return 4 }
