// Package engine is keepstate's stream processor for keyed aggregations.
// A Job says how input records are decoded, keyed and added to their key's
// aggregate, how the aggregate is stored, and which of its fields are
// indexed. The engine consumes the job's input, rekeys records by the job's
// key into a repartition topic, aggregates them in one task per partition,
// and keeps the aggregates in a pluggable Table (one per job) with a
// checkpoint of the changelog, so that a restart or a rebalance resumes
// from the store instead of replaying the changelog. Every record counts
// exactly once across crashes, restarts, rebalances and paused instances
// (Kafka transactions plus fencing tokens in the store; see
// docs/design.md).
//
// keepstate's flagship job, a running average per key, is written on the
// same API in its own package.
//
// The package defines the contracts it needs (Table, Tables and
// their optional abilities, Kafka); store implementations live in other
// packages and import engine, never the reverse. engine imports no Clover,
// Redis or HTTP code.
package engine
