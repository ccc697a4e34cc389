package redisstore

// The key layout and the index members are described in doc.go. A hash
// field s or d is absent when Sources or Value is nil, so nil and empty
// come back as they went in. Numbers are not scores: a cursor inside a run
// of equal values must be an exclusive (value, key) bound, which a score
// range cannot express without scanning the ties. Members sort as (value,
// key) ascending and REV is its exact reverse, the contract's descending
// order; bounds and cursors are lexicographic bounds (exclusive for a
// cursor). The hash fields 0..7 hold what the scripts need to find a
// document's old members: the 8 bytes of a number, the string itself. A
// number is read back from its 8 bytes, so -0 comes back as +0 (equal, as
// the contract compares them).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
)

var (
	_ engine.Tables        = (*Store)(nil)
	_ engine.Table         = (*table)(nil)
	_ engine.TableScanner  = (*table)(nil)
	_ engine.TableResetter = (*table)(nil)
)

// table is one engine.Table of a Store.
type table struct {
	s      *Store
	spec   engine.TableSpec
	keys   tableKeys
	specV  string   // the spec as stored in K spec
	fields []string // the hash fields read back into a Doc, in order
	kinds  string   // one letter per index, "n" or "s", for the scripts

	stream *TableStream // nil without a stream (WithTableStream)
}

// tiesSuffix ends the stored spec of a TiesAscending table.
const tiesSuffix = ";ties-ascending"

// Fixed hash fields of a document, before the index fields "0".."7".
const (
	fieldPartition = "p"
	fieldVersion   = "v"
	fieldSources   = "s"
	fieldValue     = "d"
	fixedFields    = 4
)

// specLua creates K spec when absent and returns the stored spec.
// KEYS: 1 spec. ARGV: 1 spec.
const specLua = `
local cur = redis.call('GET', KEYS[1])
if cur then return cur end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
`

// claimLua re-creates K spec when Redis lost it (so a table opened later
// with other indexes is still refused) and increments the epoch.
// KEYS: 1 spec, 2 epoch. ARGV: 1 spec. Reply: {1, epoch} or {0, stored spec}.
const claimLua = `
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return {0, cur} end
if not cur then redis.call('SET', KEYS[1], ARGV[1]) end
return {1, redis.call('INCR', KEYS[2])}
`

var (
	specScript  = redis.NewScript(specLua)
	claimScript = redis.NewScript(claimLua)
)

// OpenTable opens the table of spec, creating it when new: the spec is
// stored in Redis, and opening the same name again with other indexes (or
// the same ones in another order, or another TiesAscending) fails with an
// error wrapping engine.ErrInvalid that names both. Opening the table
// "movies" with one number index and TiesAscending (the movie job's
// table) first migrates the movie layout found under the store's prefix
// into it (see migrate.go): the first such open of a database written by
// an older build takes about as long as the migration, and waits for
// another instance that is migrating (never on a cluster). On a cluster
// spec.Partitions must be set (engine.ErrInvalid otherwise), and a table
// in the layout that kept it under one hash tag is refused with
// ErrOldLayout. Tables share the store's client and are closed with it.
// Safe for concurrent use.
func (s *Store) OpenTable(ctx context.Context, spec engine.TableSpec) (engine.Table, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("redisstore: open table: %w", err)
	}
	t := newTable(s, spec)
	if err := t.checkLayout(ctx); err != nil {
		return nil, err
	}
	stored, err := specScript.Run(ctx, s.client, []string{t.keys.spec(0)}, t.specV).Text()
	if err != nil {
		return nil, wrap("open table "+spec.Name, err)
	}
	if err := t.sameSpec(stored); err != nil {
		return nil, err
	}
	if isMovieSpec(spec) {
		if err := s.migrateMovies(ctx, t); err != nil {
			return nil, err
		}
	}
	s.log.Debug("table open", "table", spec.Name, "indexes", t.specV)
	return t, nil
}

func newTable(s *Store, spec engine.TableSpec) *table {
	spec.Indexes = append([]engine.IndexSpec(nil), spec.Indexes...)
	t := &table{s: s, spec: spec, keys: s.keys.table(spec.Name)}
	t.fields = []string{fieldPartition, fieldVersion, fieldSources, fieldValue}
	parts := make([]string, len(spec.Indexes))
	var kinds strings.Builder
	for i, ix := range spec.Indexes {
		parts[i] = ix.Name + ":" + ix.Kind.String()
		t.fields = append(t.fields, strconv.Itoa(i))
		if ix.Kind == engine.IndexNumber {
			kinds.WriteByte('n')
		} else {
			kinds.WriteByte('s')
		}
	}
	t.specV = "1|" + strings.Join(parts, ",")
	if spec.TiesAscending {
		t.specV += tiesSuffix
	}
	t.kinds = kinds.String()
	if st, ok := s.opts.streams[spec.Name]; ok && st.MaxLen > 0 {
		t.stream = &st
	}
	return t
}

// streamKey is the key of the stream an Apply to partition p writes.
func (t *table) streamKey(p int32) string { return t.keys.stream(t.s.keys.prefix, p, t.stream.Key) }

// indexKeys returns the sorted sets of partition p's index values, in
// declaration order (on a single server, the table's).
func (t *table) indexKeys(p int32) []string {
	out := make([]string, len(t.spec.Indexes))
	for i, ix := range t.spec.Indexes {
		out[i] = t.keys.index(p, ix.Name)
	}
	return out
}

// sameSpec compares the spec stored in Redis with t's.
func (t *table) sameSpec(stored string) error {
	if stored == t.specV {
		return nil
	}
	show := func(v string) string {
		if rest, ok := strings.CutPrefix(v, "1|"); ok {
			if rest, ok := strings.CutSuffix(rest, tiesSuffix); ok {
				return "[" + rest + "] with ties ascending"
			}
			return "[" + rest + "]"
		}
		return fmt.Sprintf("%q", v)
	}
	return fmt.Errorf("redisstore: table %s exists with indexes %s, not %s (a table's indexes cannot change; reset it or use a new name): %w",
		t.spec.Name, show(stored), show(t.specV), engine.ErrInvalid)
}

// Spec returns the table's spec.
func (t *table) Spec() engine.TableSpec {
	spec := t.spec
	spec.Indexes = append([]engine.IndexSpec(nil), t.spec.Indexes...)
	return spec
}

// Claim makes the caller the writer of partition p (INCR of its epoch key)
// and returns the new epoch. It stores the table's spec again when Redis
// lost it. Safe for concurrent use.
func (t *table) Claim(ctx context.Context, p int32) (int64, error) {
	// Epochs start again at 1 after Redis lost them: what this store wrote
	// under an earlier claim says nothing of the new one.
	t.s.written.forget(t.keys.batch(p))
	reply, err := claimScript.Run(ctx, t.s.client, []string{t.keys.spec(p), t.keys.epoch(p)}, t.specV).Slice()
	if err != nil {
		return 0, wrap(fmt.Sprintf("table %s: claim partition %d%s", t.spec.Name, p, t.keys.where(p)), err)
	}
	if len(reply) == 2 {
		switch reply[0] {
		case int64(1):
			if e, ok := reply[1].(int64); ok {
				return e, nil
			}
		case int64(0):
			if stored, ok := reply[1].(string); ok {
				return 0, t.sameSpec(stored)
			}
		}
	}
	return 0, fmt.Errorf("redisstore: table %s: claim partition %d: unexpected script reply %v", t.spec.Name, p, reply)
}

// Checkpoint returns the next changelog offset to read for partition p; ok
// is false when the table holds no checkpoint for p. Safe for concurrent
// use.
func (t *table) Checkpoint(ctx context.Context, p int32) (int64, bool, error) {
	v, err := t.s.client.Get(ctx, t.keys.checkpoint(p)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, wrap(fmt.Sprintf("table %s: checkpoint of partition %d%s", t.spec.Name, p, t.keys.where(p)), err)
	}
	next, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("redisstore: table %s: checkpoint of partition %d is %q: %w", t.spec.Name, p, v, errCorrupt)
	}
	return next, true, nil
}

// Get returns the document of key, or an error wrapping engine.ErrNotFound.
// Safe for concurrent use.
func (t *table) Get(ctx context.Context, key []byte) (engine.Doc, error) {
	if len(key) == 0 || len(key) > engine.MaxKeyBytes {
		return engine.Doc{}, fmt.Errorf("redisstore: table %s: get key of %d bytes: %w", t.spec.Name, len(key), engine.ErrNotFound)
	}
	vals, err := t.s.client.HMGet(ctx, t.keys.doc(t.home(key), key), t.fields...).Result()
	if err != nil {
		return engine.Doc{}, wrap(fmt.Sprintf("table %s: get %x%s", t.spec.Name, key, t.keys.where(t.home(key))), err)
	}
	d, ok, err := t.decode(key, vals)
	if err != nil {
		return engine.Doc{}, fmt.Errorf("redisstore: table %s: get %x: %w", t.spec.Name, key, err)
	}
	if !ok {
		return engine.Doc{}, fmt.Errorf("redisstore: table %s: key %x: %w", t.spec.Name, key, engine.ErrNotFound)
	}
	return d, nil
}

// Load returns the stored documents of keys by string(key), read in one
// MULTI/EXEC round trip so they come from the same moment (on a cluster,
// one per partition: a partition's documents come from the same moment);
// keys without a document (or longer than engine.MaxKeyBytes) are absent
// from the map. Safe for concurrent use.
func (t *table) Load(ctx context.Context, keys [][]byte) (map[string]engine.Doc, error) {
	out := make(map[string]engine.Doc, len(keys))
	byPart := make(map[int32][][]byte, 1)
	var order []int32
	for _, k := range keys {
		if len(k) > 0 && len(k) <= engine.MaxKeyBytes {
			p := t.home(k)
			if _, ok := byPart[p]; !ok {
				order = append(order, p)
			}
			byPart[p] = append(byPart[p], k)
		}
	}
	for _, p := range order {
		if err := t.loadPartition(ctx, p, byPart[p], out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// loadPartition reads the documents of keys, all in partition p, into out
// in one MULTI/EXEC.
func (t *table) loadPartition(ctx context.Context, p int32, want [][]byte, out map[string]engine.Doc) error {
	cmds, err := t.s.hmget(ctx, true, len(want), func(i int) string { return t.keys.doc(p, want[i]) }, t.fields)
	if err != nil {
		return wrap(fmt.Sprintf("table %s: load %d documents%s", t.spec.Name, len(want), t.keys.where(p)), err)
	}
	for i, c := range cmds {
		d, ok, err := t.decode(want[i], c.Val())
		if err != nil {
			return fmt.Errorf("redisstore: table %s: load %x: %w", t.spec.Name, want[i], err)
		}
		if ok {
			out[string(want[i])] = d
		}
	}
	return nil
}

// decode builds the document of key from the values of t.fields; ok is
// false when the hash does not exist. key is copied.
func (t *table) decode(key []byte, vals []any) (d engine.Doc, ok bool, err error) {
	if len(vals) != len(t.fields) {
		return d, false, fmt.Errorf("%d fields, want %d: %w", len(vals), len(t.fields), errCorrupt)
	}
	str := make([]string, len(vals))
	has := make([]bool, len(vals))
	found := false
	for i, v := range vals {
		switch v := v.(type) {
		case nil:
		case string:
			str[i], has[i], found = v, true, true
		default:
			return d, false, fmt.Errorf("field %s has type %T: %w", t.fields[i], v, errCorrupt)
		}
	}
	if !found {
		return d, false, nil
	}
	if !has[0] || !has[1] {
		return d, false, fmt.Errorf("document without partition or version: %w", errCorrupt)
	}
	p, err := strconv.ParseInt(str[0], 10, 32)
	if err != nil {
		return d, false, fmt.Errorf("partition %q: %w", str[0], errCorrupt)
	}
	d.Partition = int32(p)
	if d.Version, err = strconv.ParseInt(str[1], 10, 64); err != nil {
		return d, false, fmt.Errorf("version %q: %w", str[1], errCorrupt)
	}
	if has[2] {
		if d.Sources, err = decodeSources(str[2]); err != nil {
			return d, false, err
		}
		if d.Sources == nil {
			d.Sources = map[int32]int64{}
		}
	}
	if has[3] {
		d.Value = []byte(str[3])
	}
	if n := len(t.spec.Indexes); n > 0 {
		d.Index = make([]engine.IndexValue, n)
		for i, ix := range t.spec.Indexes {
			j := fixedFields + i
			if !has[j] {
				return d, false, fmt.Errorf("document without index %s: %w", ix.Name, errCorrupt)
			}
			if d.Index[i], err = decodeIndex(str[j], ix.Kind); err != nil {
				return d, false, fmt.Errorf("index %s: %w", ix.Name, err)
			}
		}
	}
	d.Key = append([]byte(nil), key...)
	return d, true, nil
}

// decodeIndex reads a stored index field (see storedIndex).
func decodeIndex(v string, kind engine.IndexKind) (engine.IndexValue, error) {
	if kind == engine.IndexString {
		return engine.Str(v), nil
	}
	f, ok := decodeNumberPrefix([]byte(v))
	if !ok {
		return engine.IndexValue{}, fmt.Errorf("number of %d bytes: %w", len(v), errCorrupt)
	}
	return engine.Num(f), nil
}
