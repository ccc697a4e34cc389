// Package kafkatest is an in-memory Kafka cluster implementing
// engine.Kafka, for broker-free tests of the engine's processing protocol.
//
// It models what the engine relies on, with Kafka's semantics:
//
//   - topics with partitions, created through the cluster admin or
//     Cluster.CreateTopic;
//   - records with offsets, keys, values and headers, appended by
//     sync producers (idempotent or transactional) or Cluster.Append;
//   - transactions: records of an open or aborted transaction are invisible
//     to read_committed readers (consumer group claims and Log), and a
//     transaction's end writes a control marker that takes an offset, as on
//     a real broker; offsets added to a transaction become the group's
//     committed offsets only when it commits; opening a producer with a
//     transactional id fences the previous one (ErrProducerFenced) and
//     aborts its open transaction; a transactional offset commit carrying a
//     stale generation or an unknown member fails at commit (KIP-447);
//   - consumer groups with an eager, range-style assignment, generations,
//     a join barrier, rebalances on join and leave, non-transactional
//     offset commits checked against the generation, static membership
//     (a second member with the same instance id fences the first), and
//     DescribeConsumerGroups with member metadata and assignments encoded
//     as sarama decodes them;
//   - the engine.Log a restore reads (log start, stable end, committed
//     records).
//
// Tests inject faults with Cluster.FailNext or Cluster.SetFault, and inspect
// the records of a partition, the committed offsets of a group, and an
// ordered event log (Cluster.Events) to which they may add their own
// entries (Cluster.Note), for instance store writes.
//
// It differs from Kafka on purpose, where the engine does not depend on
// the difference: every Consume call starts a new generation (Kafka
// rebalances only when the membership or the subscription changes);
// offset fetches do not wait for open transactions (a commit here is
// applied in one step, so there is no window to wait out).
//
// Everything is guarded by one lock per Cluster, so every value here is
// safe for concurrent use. Methods of the sarama interfaces that the
// engine does not call are not modelled: they are inherited from a nil
// embedded interface and panic.
package kafkatest
