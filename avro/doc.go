// Package avro reads and writes keepstate's Avro records in the Confluent
// wire format: a magic byte 0, the 4-byte big-endian id of the writer schema
// in a Confluent-compatible Schema Registry, then the Avro binary encoding.
//
// Registry is the client: it registers schemas (subject "<topic>-value", as
// the Confluent serializer does), fetches writer schemas by id and caches
// them, so that after the first record of a schema id decoding never touches
// the network. Decoding uses the writer schema, so records written with an
// evolved schema (extra fields, int or float instead of long or double) are
// read as the Avro resolution rules would.
//
// Errors are classified with sentinels checked by errors.Is: ErrNotFramed,
// ErrDecode and ErrUnknownSchema mean the record itself is bad (dead-letter
// it); ErrRegistryUnavailable means the registry could not be asked (retry).
//
// Importing the package lowers goavro.MaxBlockCount to 1<<20 items per block
// so that a hostile record whose writer schema has an array or map cannot
// make goavro allocate gigabytes up front.
package avro
