// Package engine is keepstate's stream processor: it consumes Avro ratings,
// rekeys them by movie id into a repartition topic, aggregates count and sum
// per movie in one task per partition, and keeps the aggregates in a
// pluggable Store with a checkpoint of the changelog, so that a restart or a
// rebalance resumes from the store instead of replaying the changelog.
//
// The package defines the contracts it needs (Store and its optional
// abilities); store implementations live in other packages and import engine,
// never the reverse. engine imports no Clover, Redis or HTTP code.
package engine
