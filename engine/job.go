package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// ErrRetry marks a temporary failure of a job's decoder (for example the
// Schema Registry not answering): the engine retries the record with
// backoff instead of dead-lettering it. Wrap it with %w.
var ErrRetry = errors.New("temporarily unavailable")

// Job is one keyed aggregation: where its records come from, how each is
// keyed and added to its key's aggregate, how the aggregate is stored, and
// which of its fields are indexed for queries. K is the key type, V the
// input record type, A the aggregate type (its zero value is the empty
// aggregate). The engine runs a job exactly once per record across
// crashes, restarts and rebalances (see Engine). A Job is a value: build it
// once, then pass it to NewJob (or a runtime that runs several jobs); its
// functions are called from several goroutines and must be safe for
// concurrent use.
type Job[K comparable, V, A any] struct {
	// Name names the job's table, its HTTP routes and (in a runtime with
	// several jobs) its consumer group and internal topics
	// ([a-z][a-z0-9_-]{0,63}).
	Name string
	// Decode turns an input record's value into a V. An error wrapping
	// ErrRetry is retried; any other error sends the record to the
	// dead-letter topic with the error as the reason. Decoders: JSON, Raw,
	// and avro.Decoder for Confluent-framed Avro of any schema.
	Decode func(ctx context.Context, value []byte) (V, error)
	// Key returns the aggregation key of v. An error dead-letters the
	// record.
	Key func(v V) (K, error)
	// Keys encodes keys into record keys (Int64Keys, StringKeys).
	Keys KeyCodec[K]
	// Add adds v to the aggregate a in place.
	Add func(a *A, v V)
	// Values encodes the aggregate in the store (JSONCodec by default).
	Values Codec[A]
	// Changelog encodes the aggregate in the changelog topic; nil uses
	// Values.
	Changelog Codec[A]
	// Indexes are the aggregate's declared secondary indexes, queryable
	// with Table.Query (NumberIndex, StringIndex).
	Indexes []Index[A]
	// TiesAscending orders aggregates with equal index values by key
	// ascending in descending queries too (see TableSpec.TiesAscending).
	TiesAscending bool
	// Output, when set, writes a record per changed aggregate to the
	// output topic on every flush: the aggregate's key and, as value, what
	// Output appends to dst.
	Output func(dst []byte, a A) []byte
}

// KeyCodec turns keys into record keys and back. Encodings must be
// deterministic: the record key's bytes decide the partition.
type KeyCodec[K any] struct {
	// Append appends the encoding of k to dst.
	Append func(dst []byte, k K) []byte
	// Decode reads an encoded key; an error wraps ErrInvalid.
	Decode func(b []byte) (K, error)
	// Parse reads a key as written in a URL; an error wraps ErrInvalid.
	Parse func(s string) (K, error)
	// Format writes a key for URLs and JSON (the inverse of Parse).
	Format func(k K) string
	// Kind names the key type ("int64", "string").
	Kind string
	// Size is the length of every encoded key, or 0 when keys vary in
	// length. Keys of another length are refused (dead-lettered).
	Size int
}

// Int64Keys encodes int64 keys as 8 bytes big-endian, as Java's
// LongSerializer does (so Kafka Streams and keepstate agree on partitions).
var Int64Keys = KeyCodec[int64]{
	Append: func(dst []byte, k int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(k)) },
	Decode: func(b []byte) (int64, error) {
		if len(b) != 8 {
			return 0, fmt.Errorf("int64 key is %d bytes, want 8: %w", len(b), ErrInvalid)
		}
		return int64(binary.BigEndian.Uint64(b)), nil
	},
	Parse: func(s string) (int64, error) {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("key %q is not a 64-bit integer: %w", s, ErrInvalid)
		}
		return v, nil
	},
	Format: func(k int64) string { return strconv.FormatInt(k, 10) },
	Kind:   "int64",
	Size:   8,
}

// StringKeys encodes string keys as their UTF-8 bytes, as Java's
// StringSerializer does. Keys must be valid UTF-8 of 1 to MaxKeyBytes bytes.
var StringKeys = KeyCodec[string]{
	Append: func(dst []byte, k string) []byte { return append(dst, k...) },
	Decode: func(b []byte) (string, error) { return checkStringKey(string(b)) },
	Parse:  checkStringKey,
	Format: func(k string) string { return k },
	Kind:   "string",
}

func checkStringKey(s string) (string, error) {
	if len(s) == 0 || len(s) > MaxKeyBytes || !utf8.ValidString(s) {
		return "", fmt.Errorf("string key must be UTF-8 of 1 to %d bytes: %w", MaxKeyBytes, ErrInvalid)
	}
	return s, nil
}

// Codec encodes and decodes values of T. topic is the Kafka topic the
// bytes are for (a Schema Registry codec derives its subject from it), or
// "" for the store. Implementations must be safe for concurrent use;
// decode errors wrap ErrInvalid (or ErrRetry for a temporary failure).
type Codec[T any] interface {
	Encode(ctx context.Context, topic string, v T) ([]byte, error)
	Decode(ctx context.Context, topic string, b []byte) (T, error)
}

// Appender is an optional ability of a store Codec: appending the
// encoding of v to dst without an allocation of its own.
type Appender[T any] interface {
	Append(dst []byte, v T) []byte
}

// JSONCodec returns a Codec that encodes T with encoding/json.
func JSONCodec[T any]() Codec[T] { return jsonCodec[T]{} }

type jsonCodec[T any] struct{}

func (jsonCodec[T]) Encode(_ context.Context, _ string, v T) ([]byte, error) { return json.Marshal(v) }
func (jsonCodec[T]) Decode(_ context.Context, _ string, b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("decode json: %w: %w", ErrInvalid, err)
	}
	return v, nil
}

// JSON returns a decoder of JSON input records into V. Unknown fields are
// ignored; malformed JSON is dead-lettered.
func JSON[V any]() func(ctx context.Context, value []byte) (V, error) {
	return func(_ context.Context, b []byte) (V, error) {
		var v V
		if err := json.Unmarshal(b, &v); err != nil {
			return v, fmt.Errorf("decode json record: %w: %w", ErrInvalid, err)
		}
		return v, nil
	}
}

// Raw is the decoder of input records taken as they are (V = []byte). The
// slice must not be kept past Key and Add: it is the consumer's buffer.
func Raw(_ context.Context, value []byte) ([]byte, error) { return value, nil }

// Index is one declared secondary index of an aggregate A: its name, kind
// and the function that extracts its value.
type Index[A any] struct {
	spec IndexSpec
	num  func(A) float64
	str  func(A) string
}

// NumberIndex declares a numeric index: value(a) must be finite.
func NumberIndex[A any](name string, value func(a A) float64) Index[A] {
	return Index[A]{spec: IndexSpec{Name: name, Kind: IndexNumber}, num: value}
}

// StringIndex declares a string index: value(a) must be UTF-8 without NUL,
// at most MaxIndexStringBytes bytes.
func StringIndex[A any](name string, value func(a A) string) Index[A] {
	return Index[A]{spec: IndexSpec{Name: name, Kind: IndexString}, str: value}
}

// Spec returns the index's name and kind.
func (ix Index[A]) Spec() IndexSpec { return ix.spec }

func (ix Index[A]) value(a A) IndexValue {
	if ix.num != nil {
		return IndexValue{Num: ix.num(a)}
	}
	return IndexValue{Str: ix.str(a)}
}

// Spec returns the table spec of j.
func (j Job[K, V, A]) Spec() TableSpec {
	s := TableSpec{Name: j.Name, TiesAscending: j.TiesAscending}
	for _, ix := range j.Indexes {
		s.Indexes = append(s.Indexes, ix.spec)
	}
	return s
}

// Validate reports what is missing or malformed in j, wrapping ErrInvalid.
func (j Job[K, V, A]) Validate() error {
	var errs []error
	if err := j.Spec().Validate(); err != nil {
		errs = append(errs, err)
	}
	if j.Decode == nil || j.Key == nil || j.Add == nil {
		errs = append(errs, errors.New("the decode, key and add functions are required"))
	}
	if j.Keys.Append == nil || j.Keys.Decode == nil || j.Keys.Parse == nil || j.Keys.Format == nil {
		errs = append(errs, errors.New("the key codec must be complete (Int64Keys, StringKeys)"))
	}
	for _, ix := range j.Indexes {
		if ix.num == nil && ix.str == nil {
			errs = append(errs, fmt.Errorf("index %q: build it with NumberIndex or StringIndex", ix.spec.Name))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("job %q: %w: %w", j.Name, ErrInvalid, errors.Join(errs...))
	}
	return nil
}
