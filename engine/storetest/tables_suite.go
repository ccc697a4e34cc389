package storetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/keepstate/keepstate/engine"
)

// TablesOpener returns a fresh, empty store holding tables for one
// sub-test; it registers its own cleanup (t.Cleanup) to close the store.
type TablesOpener func(t *testing.T) engine.Tables

// MovieShape is the movie job's table: int64 keys (8 bytes big-endian), one
// number index (the average rating) and TiesAscending. Treat it as read-only.
var MovieShape = engine.TableSpec{Name: "movies", Indexes: []engine.IndexSpec{{Name: "avg", Kind: engine.IndexNumber}}, TiesAscending: true,
	Partitions: Partitions}

// OrderShape is an order-totals job's table: customer-id keys, a number
// index (the total) and a string index (the tier). Treat it as read-only.
var OrderShape = engine.TableSpec{Name: "customers", Indexes: []engine.IndexSpec{
	{Name: "total", Kind: engine.IndexNumber}, {Name: "tier", Kind: engine.IndexString}}, Partitions: Partitions}

// TagShape is the table of a job keyed by arbitrary bytes (keys holding
// 0x00 and 0xff) with one string index. Treat it as read-only.
var TagShape = engine.TableSpec{Name: "tags", Indexes: []engine.IndexSpec{{Name: "tag", Kind: engine.IndexString}}, Partitions: Partitions}

// Partitions is the TableSpec.Partitions of every table the suite opens;
// each document it writes is in its key's PartitionFor partition, as the
// engine's are, so a store that keeps a partition's keys together finds them.
const Partitions int32 = 8

// RunTables runs the table conformance suite against the stores open
// returns; every sub-test opens its own, so each must be empty. Most tests
// run once per shape; optional abilities (engine.TableScanner, TableResetter,
// FilteredQuerier) are skipped when a store's tables lack them. Writes are
// batched so that stores over a network stay fast.
func RunTables(t *testing.T, open TablesOpener) {
	t.Helper()
	perShape := []struct {
		name string
		fn   func(t *testing.T, open TablesOpener, sh shape)
	}{
		{"RoundTrip", testTableRoundTrip},
		{"ReturnsCopies", testTableCopies},
		{"LoadMissing", testTableLoadMissing},
		{"GetMissing", testTableGetMissing},
		{"CheckpointMissing", testTableCheckpointMissing},
		{"ApplyInvalidIsAtomic", testTableApplyInvalid},
		{"VersionFencing", testTableVersionFencing},
		{"ReplaySkipsStale", testTableReplay},
		{"EpochFencing", testTableEpochFencing},
		{"DropPartition", testTableDropPartition},
		{"QueryOrderAndTies", perIndex(testTableQueryOrder)},
		{"QueryBounds", perIndex(testTableQueryBounds)},
		{"QueryLimit", perIndex(testTableQueryLimit)},
		{"QueryPaging", perIndex(testTableQueryPaging)},
		{"QueryAfterArbitraryCursor", perIndex(testTableQueryAfterCursor)},
		{"QueryIndexMoves", testTableQueryMoves},
		{"QueryInvalid", testTableQueryInvalid},
		{"ConcurrentReadersSeeWholeBatches", testTableConcurrentReaders},
		{"TableScanner", testTableScanner},
		{"TableResetter", testTableResetter},
		{"FilteredQuerier", testTableFilteredQuerier},
		{"RandomizedModel", testTableRandomModel},
		{"ReopenSameSpec", testReopenSameSpec},
	}
	for _, tc := range perShape {
		t.Run(tc.name, func(t *testing.T) {
			for _, sh := range shapes() {
				t.Run(sh.name, func(t *testing.T) { tc.fn(t, open, sh) })
			}
		})
	}
	once := []struct {
		name string
		fn   func(t *testing.T, open TablesOpener)
	}{
		{"OpenTableInvalidSpec", testOpenTableInvalid},
		{"ReopenDifferentSpec", testReopenDifferentSpec},
		{"TablesAreIsolated", testTablesIsolated},
		{"TableWithoutIndexes", testTableWithoutIndexes},
		{"QueryTiesAscending", testTableTiesAscending},
	}
	for _, tc := range once {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
}

// shape is one job's table as the suite exercises it: its spec, and key(i)
// is the key of its i-th aggregate (distinct for distinct i, i may be negative).
type shape struct {
	name string
	spec engine.TableSpec
	key  func(i int) []byte
}

func shapes() []shape {
	return []shape{
		{name: "movies", spec: cloneSpec(MovieShape), key: movieKey},
		{name: "customers", spec: cloneSpec(OrderShape), key: customerKey},
		{name: "tags", spec: cloneSpec(TagShape), key: tagKey},
	}
}

// keyIn returns the key of the i-th aggregate of partition p: the first of
// sh.key(i), sh.key(i+2^36), sh.key(i+2*2^36)... in p; distinct i, distinct keys.
func (sh shape) keyIn(i int, p int32) []byte {
	return findKey(p, func(m int) []byte { return sh.key(i + m<<36) })
}

// findKey returns the first of key(0), key(1)... in partition p.
func findKey(p int32, key func(m int) []byte) []byte {
	if p < 0 || p >= Partitions {
		panic(fmt.Sprintf("storetest: partition %d of %d", p, Partitions))
	}
	for m := 0; ; m++ {
		if k := key(m); engine.PartitionFor(k, Partitions) == p {
			return k
		}
	}
}

func movieKey(i int) []byte    { return binary.BigEndian.AppendUint64(nil, uint64(int64(i))) }
func customerKey(i int) []byte { return []byte(fmt.Sprintf("cust-%d", i)) }
func tagKey(i int) []byte      { return []byte(fmt.Sprintf("\x00t%d\xff", i)) }

func cloneSpec(s engine.TableSpec) engine.TableSpec {
	s.Indexes = slices.Clone(s.Indexes)
	return s
}

// index returns the index values of a document of spec: n for number indexes, s for string ones.
func index(spec engine.TableSpec, n float64, s string) []engine.IndexValue {
	out := make([]engine.IndexValue, len(spec.Indexes))
	for i, ix := range spec.Indexes {
		out[i] = engine.Str(s)
		if ix.Kind == engine.IndexNumber {
			out[i] = engine.Num(n)
		}
	}
	return out
}

// tdoc builds a valid document of the i-th key of sh in partition p.
func tdoc(sh shape, i int, p int32, version int64, n float64, s string) engine.Doc {
	return engine.Doc{Key: sh.keyIn(i, p), Partition: p, Version: version,
		Sources: map[int32]int64{p: version}, Value: []byte(fmt.Sprintf("v%d@%d\x00\xff", i, version)),
		Index: index(sh.spec, n, s)}
}

// openTable opens a fresh store and the table of spec in it.
func openTable(t *testing.T, open TablesOpener, spec engine.TableSpec) (engine.Tables, engine.Table) {
	t.Helper()
	ts := open(t)
	if ts == nil {
		t.Fatal("open returned a nil store")
	}
	return ts, mustOpen(t, ts, spec)
}

func mustOpen(t *testing.T, ts engine.Tables, spec engine.TableSpec) engine.Table {
	t.Helper()
	tb, err := ts.OpenTable(ctx(t), spec)
	if err != nil {
		t.Fatalf("OpenTable(%s): %v", spec.Name, err)
	}
	if tb == nil {
		t.Fatalf("OpenTable(%s) returned a nil table", spec.Name)
	}
	return tb
}

func tclaim(t *testing.T, tb engine.Table, p int32) int64 {
	t.Helper()
	e, err := tb.Claim(ctx(t), p)
	if err != nil {
		t.Fatalf("Claim(%d): %v", p, err)
	}
	return e
}

// tapply claims p (so the epoch is current) and applies docs with checkpoint next.
func tapply(t *testing.T, tb engine.Table, p int32, next int64, docs ...engine.Doc) {
	t.Helper()
	if err := tb.Apply(ctx(t), tbatch(p, tclaim(t, tb, p), next, docs...)); err != nil {
		t.Fatalf("Apply(partition %d, %d docs, checkpoint %d): %v", p, len(docs), next, err)
	}
}

// tbatch returns the batch of docs to partition p with epoch and checkpoint.
func tbatch(p int32, epoch, checkpoint int64, docs ...engine.Doc) engine.DocBatch {
	return engine.DocBatch{Partition: p, Epoch: epoch, Docs: docs, Checkpoint: checkpoint}
}

func tdrop(t *testing.T, tb engine.Table, p int32) {
	t.Helper()
	if err := tb.DropPartition(ctx(t), p); err != nil {
		t.Fatalf("DropPartition(%d): %v", p, err)
	}
}

// wantApply asserts that Apply(b) fails wrapping want, or succeeds if want is nil; what names b.
func wantApply(t *testing.T, tb engine.Table, b engine.DocBatch, want error, what string) {
	t.Helper()
	if err := tb.Apply(ctx(t), b); !errors.Is(err, want) {
		t.Fatalf("Apply %s = %v; want %s", what, err, errNames[want])
	}
}

var errNames = map[error]string{nil: "success", engine.ErrFenced: "ErrFenced", engine.ErrInvalid: "ErrInvalid"}

// wantTCheckpoint asserts the checkpoint of p.
func wantTCheckpoint(t *testing.T, tb engine.Table, p int32, want int64, wantOK bool) {
	t.Helper()
	got, ok, err := tb.Checkpoint(ctx(t), p)
	if err != nil {
		t.Fatalf("Checkpoint(%d): %v", p, err)
	}
	if ok != wantOK || (ok && got != want) {
		t.Fatalf("Checkpoint(%d) = %d, %v; want %d, %v", p, got, ok, want, wantOK)
	}
}

// wantTDoc asserts that Get returns each of want.
func wantTDoc(t *testing.T, tb engine.Table, want ...engine.Doc) {
	t.Helper()
	for _, w := range want {
		got, err := tb.Get(ctx(t), w.Key)
		if err != nil {
			t.Fatalf("Get(%s): %v", showKey(w.Key), err)
		}
		if !sameDoc(tb.Spec(), got, w) {
			t.Fatalf("Get(%s) = %s; want %s", showKey(w.Key), showDoc(got), showDoc(w))
		}
	}
}

// wantTAbsent asserts that Get returns ErrNotFound for each of keys.
func wantTAbsent(t *testing.T, tb engine.Table, keys ...[]byte) {
	t.Helper()
	for _, key := range keys {
		if got, err := tb.Get(ctx(t), key); !errors.Is(err, engine.ErrNotFound) {
			t.Fatalf("Get(%s) = %s, %v; want ErrNotFound", showKey(key), showDoc(got), err)
		}
	}
}

func docKeys(docs []engine.Doc) [][]byte {
	out := make([][]byte, len(docs))
	for i, d := range docs {
		out[i] = d.Key
	}
	return out
}

// wantTLoad asserts that Load(keys) returns exactly the documents of md that keys name.
func wantTLoad(t *testing.T, tb engine.Table, keys [][]byte, md tmodel) {
	t.Helper()
	got, err := tb.Load(ctx(t), keys)
	if err != nil {
		t.Fatalf("Load(%d keys): %v", len(keys), err)
	}
	want := tmodel{}
	for _, k := range keys {
		if d, ok := md[string(k)]; ok {
			want[string(k)] = d
		}
	}
	wantTDocs(t, fmt.Sprintf("Load(%d keys)", len(keys)), tb.Spec(), got, want)
}

// wantTDocs asserts that got, what returned, holds exactly the documents of want.
func wantTDocs(t *testing.T, what string, spec engine.TableSpec, got map[string]engine.Doc, want tmodel) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s returned %d docs; want %d", what, len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || !sameDoc(spec, g, w) {
			t.Fatalf("%s[%s] = %s, %v; want %s", what, showKey([]byte(k)), showDoc(g), ok, showDoc(w))
		}
	}
}

// sameDoc compares two documents of spec field by field: nil and empty
// Sources or Value are equal, numbers compare with == (0 equals -0), and an
// index value must leave the field its kind does not use zero.
func sameDoc(spec engine.TableSpec, a, b engine.Doc) bool {
	return bytes.Equal(a.Key, b.Key) && a.Partition == b.Partition && a.Version == b.Version &&
		bytes.Equal(a.Value, b.Value) && len(a.Index) == len(spec.Indexes) &&
		slices.EqualFunc(a.Index, b.Index, sameValue) && maps.Equal(a.Sources, b.Sources)
}

func sameKey(a, b engine.Doc) bool { return bytes.Equal(a.Key, b.Key) }

func sameValue(a, b engine.IndexValue) bool {
	return a.Num == b.Num && a.Str == b.Str // each kind leaves the other field zero
}

func showDoc(d engine.Doc) string {
	vals := make([]string, len(d.Index))
	for i, v := range d.Index {
		vals[i] = showValue(v)
	}
	value := string(d.Value)
	if len(value) > 40 {
		value = fmt.Sprintf("%s...(%d bytes)", value[:40], len(d.Value))
	}
	return fmt.Sprintf("{key %s partition %d version %d sources %v value %q index [%s]}",
		showKey(d.Key), d.Partition, d.Version, d.Sources, value, strings.Join(vals, " "))
}

func showValue(v engine.IndexValue) string {
	switch {
	case v.Str == "" && (v.Num != 0 || math.Signbit(v.Num)):
		return fmt.Sprint(v.Num)
	case v.Str != "" && v.Num == 0:
		if len(v.Str) > 20 {
			return fmt.Sprintf("%q...(%d bytes)", v.Str[:20], len(v.Str))
		}
		return fmt.Sprintf("%q", v.Str)
	}
	return fmt.Sprintf("{%v %q}", v.Num, v.Str)
}

// showKey prints a key readably: printable text as is, 8-byte binary keys
// as the int64 they encode, anything else in hex.
func showKey(k []byte) string {
	if len(k) > 24 {
		return fmt.Sprintf("%s...(%d bytes)", showKey(k[:16]), len(k))
	}
	notPrint := func(r rune) bool { return !unicode.IsPrint(r) }
	switch {
	case len(k) > 0 && utf8.Valid(k) && !strings.ContainsFunc(string(k), notPrint):
		return string(k)
	case len(k) == 8:
		return fmt.Sprintf("#%d", int64(binary.BigEndian.Uint64(k)))
	}
	return fmt.Sprintf("0x%x", k)
}

func showKeys(docs []engine.Doc) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = showKey(d.Key)
	}
	return out
}

// ctx returns a context with a deadline, so a hanging store fails the test.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
