package engine

import (
	"context"
	"encoding/json"
	"fmt"
)

// Runner is the engine's untyped view of a job: what NewJob runs. Build it
// from a typed Job with Job.Runner. Its methods are safe for concurrent
// use; an aggregate (Agg) belongs to one task at a time.
type Runner interface {
	// Spec is the job's table spec.
	Spec() TableSpec
	// AppendKey decodes an input record's value and appends its record
	// key to dst. Errors as Job.Decode.
	AppendKey(ctx context.Context, dst, value []byte) ([]byte, error)
	// CheckKey validates a record key (ErrInvalid).
	CheckKey(key []byte) error
	// NewAgg returns an empty aggregate.
	NewAgg() Agg
	// Add decodes a repartition record (key and value) and adds it to a.
	// Errors as Job.Decode; a record whose key does not match its value is
	// ErrInvalid.
	Add(ctx context.Context, a Agg, key, value []byte) error
	// DecodeValue decodes a stored Doc.Value.
	DecodeValue(ctx context.Context, b []byte) (Agg, error)
	// EncodeChangelog and DecodeChangelog code the changelog value.
	EncodeChangelog(ctx context.Context, topic string, a Agg) ([]byte, error)
	DecodeChangelog(ctx context.Context, topic string, b []byte) (Agg, error)
	// HasOutput reports whether flushes write output records.
	HasOutput() bool
	// AppendOutput appends the output record value of a to dst.
	AppendOutput(dst []byte, a Agg) []byte
	// ParseKey and FormatKey convert record keys from and to URL text.
	ParseKey(s string) ([]byte, error)
	FormatKey(key []byte) string
	// KeyKind names the key type ("int64", "string").
	KeyKind() string
	// KeySize is the length of every record key, 0 when they vary.
	KeySize() int
	// ValueJSON renders a stored Doc.Value as JSON (the aggregate type
	// through encoding/json).
	ValueJSON(ctx context.Context, value []byte) (json.RawMessage, error)
}

// Agg is one aggregate held by the engine: opaque but for its store
// encoding and index values.
type Agg interface {
	// AppendValue appends the store encoding (Job.Values) to dst.
	AppendValue(ctx context.Context, dst []byte) ([]byte, error)
	// AppendIndex appends the declared index values to dst.
	AppendIndex(dst []IndexValue) []IndexValue
}

// Runner validates j and returns its untyped form.
func (j Job[K, V, A]) Runner() (Runner, error) {
	if err := j.Validate(); err != nil {
		return nil, err
	}
	if j.Values == nil {
		j.Values = JSONCodec[A]()
	}
	if j.Changelog == nil {
		j.Changelog = j.Values
	}
	return &jobRunner[K, V, A]{j: j, spec: j.Spec()}, nil
}

type jobRunner[K comparable, V, A any] struct {
	j    Job[K, V, A]
	spec TableSpec
}

// box is the Agg of a typed job.
type box[K comparable, V, A any] struct {
	r *jobRunner[K, V, A]
	a A
}

func (b *box[K, V, A]) AppendValue(ctx context.Context, dst []byte) ([]byte, error) {
	if ap, ok := b.r.j.Values.(Appender[A]); ok {
		return ap.Append(dst, b.a), nil
	}
	v, err := b.r.j.Values.Encode(ctx, "", b.a)
	if err != nil {
		return dst, fmt.Errorf("encode %s value: %w", b.r.j.Name, err)
	}
	return append(dst, v...), nil
}

func (b *box[K, V, A]) AppendIndex(dst []IndexValue) []IndexValue {
	for _, ix := range b.r.j.Indexes {
		dst = append(dst, ix.value(b.a))
	}
	return dst
}

func (r *jobRunner[K, V, A]) Spec() TableSpec { return r.spec }

// decode decodes an input record and returns it with its key.
func (r *jobRunner[K, V, A]) decode(ctx context.Context, value []byte) (v V, k K, err error) {
	if v, err = r.j.Decode(ctx, value); err != nil {
		return v, k, err
	}
	if k, err = r.j.Key(v); err != nil {
		return v, k, fmt.Errorf("key of %s record: %w", r.j.Name, err)
	}
	return v, k, nil
}

func (r *jobRunner[K, V, A]) AppendKey(ctx context.Context, dst, value []byte) ([]byte, error) {
	_, k, err := r.decode(ctx, value)
	if err != nil {
		return dst, err
	}
	return r.appendKey(dst, k)
}

func (r *jobRunner[K, V, A]) appendKey(dst []byte, k K) ([]byte, error) {
	start := len(dst)
	dst = r.j.Keys.Append(dst, k)
	n := len(dst) - start
	if n == 0 || n > MaxKeyBytes {
		return dst[:start], fmt.Errorf("key of %d bytes (want 1..%d): %w", n, MaxKeyBytes, ErrInvalid)
	}
	if size := r.j.Keys.Size; size > 0 && n != size {
		return dst[:start], fmt.Errorf("key codec wrote %d bytes (its size is %d): %w", n, size, ErrInvalid)
	}
	return dst, nil
}

func (r *jobRunner[K, V, A]) CheckKey(key []byte) error {
	if len(key) == 0 || len(key) > MaxKeyBytes {
		return fmt.Errorf("key of %d bytes (want 1..%d): %w", len(key), MaxKeyBytes, ErrInvalid)
	}
	if n := r.j.Keys.Size; n > 0 && len(key) != n {
		return fmt.Errorf("key of %d bytes (want %d): %w", len(key), n, ErrInvalid)
	}
	_, err := r.j.Keys.Decode(key)
	return err
}

func (r *jobRunner[K, V, A]) NewAgg() Agg { return &box[K, V, A]{r: r} }

func (r *jobRunner[K, V, A]) Add(ctx context.Context, a Agg, key, value []byte) error {
	b, ok := a.(*box[K, V, A])
	if !ok {
		return fmt.Errorf("aggregate of another job: %w", ErrInvalid)
	}
	v, k, err := r.decode(ctx, value)
	if err != nil {
		return err
	}
	if rk, err := r.j.Keys.Decode(key); err != nil || rk != k {
		return fmt.Errorf("record key %s does not match its value's key %s: %w",
			r.FormatKey(key), r.j.Keys.Format(k), ErrInvalid)
	}
	r.j.Add(&b.a, v)
	return nil
}

func (r *jobRunner[K, V, A]) DecodeValue(ctx context.Context, v []byte) (Agg, error) {
	a, err := r.j.Value(ctx, Doc{Value: v})
	if err != nil {
		return nil, err
	}
	return &box[K, V, A]{r: r, a: a}, nil
}

func (r *jobRunner[K, V, A]) EncodeChangelog(ctx context.Context, topic string, a Agg) ([]byte, error) {
	b, ok := a.(*box[K, V, A])
	if !ok {
		return nil, fmt.Errorf("aggregate of another job: %w", ErrInvalid)
	}
	return r.j.Changelog.Encode(ctx, topic, b.a)
}

func (r *jobRunner[K, V, A]) DecodeChangelog(ctx context.Context, topic string, v []byte) (Agg, error) {
	a, err := r.j.Changelog.Decode(ctx, topic, v)
	if err != nil {
		return nil, err
	}
	return &box[K, V, A]{r: r, a: a}, nil
}

func (r *jobRunner[K, V, A]) HasOutput() bool { return r.j.Output != nil }

func (r *jobRunner[K, V, A]) AppendOutput(dst []byte, a Agg) []byte {
	b, ok := a.(*box[K, V, A])
	if !ok || r.j.Output == nil {
		return dst
	}
	return r.j.Output(dst, b.a)
}

func (r *jobRunner[K, V, A]) ParseKey(s string) ([]byte, error) {
	k, err := r.j.Keys.Parse(s)
	if err != nil {
		return nil, err
	}
	return r.appendKey(nil, k)
}

func (r *jobRunner[K, V, A]) FormatKey(key []byte) string {
	k, err := r.j.Keys.Decode(key)
	if err != nil {
		return fmt.Sprintf("%x", key)
	}
	return r.j.Keys.Format(k)
}

func (r *jobRunner[K, V, A]) KeyKind() string { return r.j.Keys.Kind }

func (r *jobRunner[K, V, A]) KeySize() int { return r.j.Keys.Size }

func (r *jobRunner[K, V, A]) ValueJSON(ctx context.Context, value []byte) (json.RawMessage, error) {
	a, err := r.j.Value(ctx, Doc{Value: value})
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("render %s value as json: %w", r.j.Name, err)
	}
	return b, nil
}

// Value returns the typed aggregate of a document of j's table.
func (j Job[K, V, A]) Value(ctx context.Context, d Doc) (A, error) {
	c := j.Values
	if c == nil {
		c = JSONCodec[A]()
	}
	a, err := c.Decode(ctx, "", d.Value)
	if err != nil {
		return a, fmt.Errorf("decode %s value: %w", j.Name, err)
	}
	return a, nil
}
