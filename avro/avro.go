// Package avro reads and writes keepstate's Avro records in the Confluent
// wire format: a magic byte 0, the 4-byte big-endian id of the writer schema
// in a Confluent-compatible Schema Registry, then the Avro binary encoding.
// Registry is the client. Decoding uses the writer schema, so records
// written with an evolved schema (extra fields, int or float instead of long
// or double) are read as the Avro resolution rules would. Of the sentinel
// errors, ErrNotFramed, ErrDecode and ErrUnknownSchema mean the record is
// bad (dead-letter it); ErrRegistryUnavailable, that the registry could not
// be asked (retry).
//
// Importing the package lowers goavro.MaxBlockCount to 1<<20 items per block
// so that a hostile record whose writer schema has an array or map cannot
// make goavro allocate gigabytes up front.
package avro

import (
	"errors"

	"github.com/keepstate/keepstate/engine"
)

// Sentinel errors. Check them with errors.Is; returned errors wrap them with
// context (schema id, subject, registry URL).
var (
	// ErrNotFramed means the bytes are not in the Confluent wire format:
	// shorter than 5 bytes or a magic byte other than 0. Permanent.
	ErrNotFramed = errors.New("not a confluent-framed avro record")
	// ErrUnknownSchema means the registry answered that the schema id (or
	// subject) does not exist. Permanent for the record.
	ErrUnknownSchema = errors.New("unknown schema")
	// ErrRegistryUnavailable means the registry could not be asked: network
	// error, timeout, 5xx, authentication failure or an answer that is not
	// a registry's. Transient: it wraps engine.ErrRetry, so the engine
	// retries the record rather than dead-letter it.
	ErrRegistryUnavailable error = registryUnavailable{}
	// ErrDecode means the Avro payload is truncated, malformed or has
	// trailing bytes, or the writer schema is unusable or lacks a needed
	// field (or has it with a type that cannot be read). Permanent.
	ErrDecode = errors.New("avro decode failed")
	// ErrSchemaRejected means the registry refused to register a schema
	// (invalid, or incompatible with the subject's earlier versions).
	ErrSchemaRejected = errors.New("schema rejected by registry")
)

// registryUnavailable is ErrRegistryUnavailable: an error that is also
// engine.ErrRetry for errors.Is.
type registryUnavailable struct{}

func (registryUnavailable) Error() string        { return "schema registry unavailable" }
func (registryUnavailable) Is(target error) bool { return target == engine.ErrRetry }
