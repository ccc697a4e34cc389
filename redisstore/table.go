package redisstore

// The key layout is in doc.go. A hash field s or d is absent when Sources
// or Value is nil, so nil and empty come back as they went in. Index
// values are not scores: a cursor inside a run of equal values must be an
// exclusive (value, key) bound, which a score range cannot express without
// scanning the ties; so members sort as (value, key) bytes and bounds and
// cursors are lexicographic. The hash fields 0..7 hold what the scripts
// need to find a document's old members (a number's 8 bytes, so -0 comes
// back as +0, equal as the contract compares them).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// errCorrupt marks a stored value this package cannot decode (written by
// something else, or by an incompatible version).
var errCorrupt = errors.New("corrupt stored document")

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

// specScript creates K spec when absent and returns the stored spec.
// KEYS: 1 spec. ARGV: 1 spec.
var specScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then return cur end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
`)

// claimScript re-creates K spec when Redis lost it (so a table opened
// later with other indexes is still refused) and increments the epoch.
// KEYS: 1 spec, 2 epoch. ARGV: 1 spec. Reply: {1, epoch} or {0, stored spec}.
var claimScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return {0, cur} end
if not cur then redis.call('SET', KEYS[1], ARGV[1]) end
return {1, redis.call('INCR', KEYS[2])}
`)

// OpenTable opens the table of spec, creating it when new: the spec is
// stored in Redis, and opening the name again with other indexes (or in
// another order, or another TiesAscending) fails with an error wrapping
// engine.ErrInvalid that names both. Opening the movie job's table first
// migrates the movie layout under the store's prefix into it (migrate.go;
// never on a cluster), or waits for another instance doing it. On a
// cluster spec.Partitions must be set (engine.ErrInvalid otherwise), and a
// table in the one-hash-tag layout is refused with ErrOldLayout. Tables
// share the store's client and are closed with it. Safe for concurrent use.
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
	err = t.sameSpec(stored)
	if err == nil && isMovieSpec(spec) {
		err = s.migrateMovies(ctx, t)
	}
	if err != nil {
		return nil, err
	}
	s.log.Debug("table open", "table", spec.Name, "indexes", t.specV)
	return t, nil
}

func newTable(s *Store, spec engine.TableSpec) *table {
	spec.Indexes = slices.Clone(spec.Indexes)
	t := &table{s: s, spec: spec, keys: s.keys.table(spec.Name),
		fields: []string{fieldPartition, fieldVersion, fieldSources, fieldValue}}
	parts := make([]string, len(spec.Indexes))
	for i, ix := range spec.Indexes {
		parts[i] = ix.Name + ":" + ix.Kind.String()
		t.fields = append(t.fields, strconv.Itoa(i))
		t.kinds += ix.Kind.String()[:1] // "n" or "s"
	}
	t.specV = "1|" + strings.Join(parts, ",")
	if spec.TiesAscending {
		t.specV += tiesSuffix
	}
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
		rest, ok := strings.CutPrefix(v, "1|")
		if !ok {
			return fmt.Sprintf("%q", v)
		}
		if rest, ok := strings.CutSuffix(rest, tiesSuffix); ok {
			return "[" + rest + "] with ties ascending"
		}
		return "[" + rest + "]"
	}
	return fmt.Errorf("redisstore: table %s exists with indexes %s, not %s (a table's indexes cannot change; reset it or use a new name): %w",
		t.spec.Name, show(stored), show(t.specV), engine.ErrInvalid)
}

// Spec returns the table's spec.
func (t *table) Spec() engine.TableSpec {
	spec := t.spec
	spec.Indexes = slices.Clone(t.spec.Indexes)
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
		e, isEpoch := reply[1].(int64)
		stored, isSpec := reply[1].(string)
		switch {
		case reply[0] == int64(1) && isEpoch:
			return e, nil
		case reply[0] == int64(0) && isSpec:
			return 0, t.sameSpec(stored)
		}
	}
	return 0, fmt.Errorf("redisstore: table %s: claim partition %d: unexpected script reply %v", t.spec.Name, p, reply)
}

// Checkpoint returns the next changelog offset to read for partition p; ok
// is false when there is none. Safe for concurrent use.
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
// MULTI/EXEC so they come from one moment (on a cluster, one per
// partition); keys without a document (or longer than engine.MaxKeyBytes)
// are absent. Safe for concurrent use.
func (t *table) Load(ctx context.Context, keys [][]byte) (map[string]engine.Doc, error) {
	out := make(map[string]engine.Doc, len(keys))
	byPart := make(map[int32][][]byte, 1)
	for _, k := range keys {
		if len(k) > 0 && len(k) <= engine.MaxKeyBytes {
			byPart[t.home(k)] = append(byPart[t.home(k)], k)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(byPart)) {
		want := byPart[p]
		err := t.readDocs(ctx, p, true, want, fmt.Sprintf("load %d documents", len(want)), "load %x",
			func(d engine.Doc) error {
				out[string(d.Key)] = d
				return nil
			})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readDocs reads the documents of keys, all of partition p, in one
// pipeline (in one MULTI/EXEC when atomic, so they come from one moment)
// and calls fn with each one that exists, stopping at its first error. op
// and keyOp (a format of the key) name the read in errors.
func (t *table) readDocs(ctx context.Context, p int32, atomic bool, keys [][]byte, op, keyOp string,
	fn func(engine.Doc) error) error {
	if len(keys) == 0 {
		return nil
	}
	hashes := make([]string, len(keys))
	for i, k := range keys {
		hashes[i] = t.keys.doc(p, k)
	}
	cmds, err := t.s.hmget(ctx, atomic, hashes, t.fields)
	if err != nil {
		return wrap(fmt.Sprintf("table %s: %s%s", t.spec.Name, op, t.keys.where(p)), err)
	}
	for i, c := range cmds {
		d, ok, err := t.decode(keys[i], c.Val())
		if err != nil {
			return fmt.Errorf("redisstore: table %s: "+keyOp+": %w", t.spec.Name, keys[i], err)
		}
		if ok {
			if err := fn(d); err != nil {
				return err
			}
		}
	}
	return nil
}

// hashStrings returns the string values of fields read by HMGET, and which
// were present.
func hashStrings(fields []string, vals []any) (str []string, has []bool, err error) {
	str, has = make([]string, len(vals)), make([]bool, len(vals))
	for i, v := range vals {
		switch v := v.(type) {
		case nil:
		case string:
			str[i], has[i] = v, true
		default:
			return nil, nil, fmt.Errorf("field %s has type %T: %w", fields[i], v, errCorrupt)
		}
	}
	return str, has, nil
}

// decode builds the document of key from the values of t.fields; ok is
// false when the hash does not exist. key is copied.
func (t *table) decode(key []byte, vals []any) (d engine.Doc, ok bool, err error) {
	if len(vals) != len(t.fields) {
		return d, false, fmt.Errorf("%d fields, want %d: %w", len(vals), len(t.fields), errCorrupt)
	}
	str, has, err := hashStrings(t.fields, vals)
	if err != nil || !slices.Contains(has, true) {
		return d, false, err
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
	}
	if has[3] {
		d.Value = []byte(str[3])
	}
	for i, ix := range t.spec.Indexes {
		v := str[fixedFields+i]
		if !has[fixedFields+i] {
			return d, false, fmt.Errorf("document without index %s: %w", ix.Name, errCorrupt)
		}
		iv := engine.Str(v)
		if ix.Kind == engine.IndexNumber {
			f, ok := decodeNumberPrefix([]byte(v))
			if !ok {
				return d, false, fmt.Errorf("index %s: number of %d bytes: %w", ix.Name, len(v), errCorrupt)
			}
			iv = engine.Num(f)
		}
		d.Index = append(d.Index, iv)
	}
	d.Key = slices.Clone(key)
	return d, true, nil
}

// encodeSources encodes sources as "p:o,p:o" sorted by partition.
func encodeSources(src map[int32]int64) string {
	var b []byte
	for _, p := range slices.Sorted(maps.Keys(src)) {
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(p), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, src[p], 10)
	}
	return string(b)
}

// decodeSources inverts encodeSources ("" is an empty map).
func decodeSources(s string) (map[int32]int64, error) {
	if s == "" {
		return map[int32]int64{}, nil
	}
	out := make(map[int32]int64, strings.Count(s, ",")+1)
	for item := range strings.SplitSeq(s, ",") {
		ps, os, ok := strings.Cut(item, ":")
		p, perr := strconv.ParseInt(ps, 10, 32)
		o, oerr := strconv.ParseInt(os, 10, 64)
		if !ok || perr != nil || oerr != nil {
			return nil, fmt.Errorf("sources %q: %w", s, errCorrupt)
		}
		out[int32(p)] = o
	}
	return out, nil
}

// NeedsPartitions reports whether the store keeps a partition's keys
// together (on a Redis Cluster, one hash tag per partition): then
// OpenTable needs the table's engine.TableSpec.Partitions.
func (s *Store) NeedsPartitions() bool { return s.keys.cluster }

// RemoveOldLayout deletes, on a cluster, the keys that the layout keeping
// a whole table under one hash tag ("{<prefix>t:<table>}:...") left for
// the table called name, and reports whether there were any. Elsewhere it
// does nothing.
func (s *Store) RemoveOldLayout(ctx context.Context, name string) (bool, error) {
	if !s.keys.cluster {
		return false, nil
	}
	old := s.keys.clusterTableSpec(name)
	pattern := keys{prefix: old[:len(old)-len("spec")]}.pattern()
	removed := 0
	err := s.scanKeys(ctx, pattern, scanChunk, func(page []string) error {
		// Every key of the old layout has the table's one hash tag.
		n, err := s.client.Unlink(ctx, page...).Result()
		removed += int(n)
		return err
	})
	if err != nil || removed == 0 {
		return false, wrap("table "+name+": remove the old cluster layout", err)
	}
	s.log.Info("old cluster layout removed", "table", name, "keys", removed)
	return true, nil
}

// checkLayout refuses, on a cluster, a table whose partition count is
// unknown (its keys could not be found) and one written by the layout
// that kept a whole table under one hash tag.
func (t *table) checkLayout(ctx context.Context) error {
	if !t.keys.cluster {
		return nil
	}
	if t.spec.Partitions <= 0 {
		return fmt.Errorf("redisstore: table %s: on a Redis Cluster a table needs its partition count (TableSpec.Partitions) to find a document's hash slot: %w",
			t.spec.Name, engine.ErrInvalid)
	}
	old := t.s.keys.clusterTableSpec(t.spec.Name)
	n, err := t.s.client.Exists(ctx, old).Result()
	if err != nil {
		return wrap("open table "+t.spec.Name, err)
	}
	if n > 0 {
		return fmt.Errorf("redisstore: table %s is in the earlier cluster layout, one hash slot per table (%s exists); stop every instance and run `keepstate reset` to wipe it, and the next start restores it from the changelog: %w",
			t.spec.Name, old, ErrOldLayout)
	}
	return nil
}

// home is the partition whose keys hold the document of key: on a
// cluster PartitionFor(key, Partitions); on a single server documents are
// not kept by partition, and home is 0.
func (t *table) home(key []byte) int32 {
	if !t.keys.cluster {
		return 0
	}
	return engine.PartitionFor(key, t.spec.Partitions)
}

// partitions is what a query reads: the table's one set of indexes on a
// single server, every partition's on a cluster.
func (t *table) partitions() int32 {
	if !t.keys.cluster {
		return 1
	}
	return t.spec.Partitions
}
