// Package movies is keepstate's flagship job: Confluent-framed Avro ratings
// from the Schema Registry, counted and summed per movie, indexed by their
// average, with every new average written to the output topic as Kafka
// Streams' own movie-ratings example does. It is an ordinary job of the
// engine's Job API (see Job) whose state lives in the table "movies".
package movies
