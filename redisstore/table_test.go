package redisstore

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/storetest"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestTablesConformance runs the shared table suite; every sub-test gets an
// empty store under its own prefix on one redis-server (openStore closes
// it when the sub-test ends).
func TestTablesConformance(t *testing.T) {
	r := testkit.StartRedis(t)
	storetest.RunTables(t, func(t *testing.T) engine.Tables { return openStore(t, r) })
}

// orderSpec is the table of the focused tests: a number and a string index.
var orderSpec = engine.TableSpec{Name: "orders", Indexes: []engine.IndexSpec{
	{Name: "total", Kind: engine.IndexNumber}, {Name: "tier", Kind: engine.IndexString}}}

// openTable opens spec in s, failing the test on error.
func openTable(t testing.TB, s *Store, spec engine.TableSpec) *table {
	t.Helper()
	tb, err := s.OpenTable(ctxT(t), spec)
	if err != nil {
		t.Fatalf("OpenTable(%s): %v", spec.Name, err)
	}
	return tb.(*table)
}

// odoc builds a document of orderSpec.
func odoc(key string, p int32, version int64, total float64, tier string) engine.Doc {
	return engine.Doc{Key: []byte(key), Partition: p, Version: version,
		Sources: map[int32]int64{p: version, 7: 1}, Value: []byte("v\x00\xff" + key),
		Index: []engine.IndexValue{engine.Num(total), engine.Str(tier)}}
}

// tapply claims p and applies docs with checkpoint next, failing on error.
func tapply(t testing.TB, tb engine.Table, p int32, next int64, docs ...engine.Doc) {
	t.Helper()
	e, err := tb.Claim(ctxT(t), p)
	if err != nil {
		t.Fatalf("Claim(%d): %v", p, err)
	}
	if err := tb.Apply(ctxT(t), engine.DocBatch{Partition: p, Epoch: e, Docs: docs, Checkpoint: next}); err != nil {
		t.Fatalf("Apply(partition %d, %d docs): %v", p, len(docs), err)
	}
}

// sameDoc compares documents exactly: nil and empty Value or Sources differ.
func sameDoc(a, b engine.Doc) bool {
	eqIndex := len(a.Index) == len(b.Index)
	for i := 0; eqIndex && i < len(a.Index); i++ {
		eqIndex = a.Index[i] == b.Index[i]
	}
	return bytes.Equal(a.Key, b.Key) && a.Partition == b.Partition && a.Version == b.Version &&
		bytes.Equal(a.Value, b.Value) && (a.Value == nil) == (b.Value == nil) &&
		maps.Equal(a.Sources, b.Sources) && (a.Sources == nil) == (b.Sources == nil) && eqIndex
}

func TestTableRoundTrip(t *testing.T) {
	r := testkit.StartRedis(t)
	tb := openTable(t, openStore(t, r), orderSpec)
	long := strings.Repeat("\xff\x00k", engine.MaxKeyBytes/3) + "z"
	docs := []engine.Doc{
		odoc("plain", 3, 10, 12.5, "gold"),
		odoc("\x00", 3, 11, math.Copysign(0, -1), ""),
		odoc("\xff\xfe:*?[", 3, 12, math.MaxFloat64, "é\x01"),
		odoc(long, 3, math.MaxInt64, -math.MaxFloat64, strings.Repeat("s", engine.MaxIndexStringBytes)),
		{Key: []byte("nil-value"), Partition: 3, Version: -5, Index: []engine.IndexValue{engine.Num(1), engine.Str("x")}},
		{Key: []byte("empty-value"), Partition: 3, Version: 1, Value: []byte{}, Sources: map[int32]int64{},
			Index: []engine.IndexValue{engine.Num(math.SmallestNonzeroFloat64), engine.Str("x")}},
	}
	tapply(t, tb, 3, 42, docs...)

	for _, want := range docs {
		got, err := tb.Get(ctxT(t), want.Key)
		if err != nil {
			t.Fatalf("Get(%x): %v", want.Key, err)
		}
		if !sameDoc(got, want) {
			t.Errorf("Get(%x) = %+v; want %+v", want.Key, got, want)
		}
	}
	keys := [][]byte{[]byte("missing"), {}}
	for _, d := range docs {
		keys = append(keys, d.Key)
	}
	loaded, err := tb.Load(ctxT(t), keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != len(docs) {
		t.Errorf("Load returned %d documents, want %d", len(loaded), len(docs))
	}
	for _, want := range docs {
		if got, ok := loaded[string(want.Key)]; !ok || !sameDoc(got, want) {
			t.Errorf("Load[%x] = %+v, %v; want %+v", want.Key, got, ok, want)
		}
	}
	if _, err := tb.Get(ctxT(t), []byte("missing")); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get(missing) = %v; want ErrNotFound", err)
	}
	if next, ok, err := tb.Checkpoint(ctxT(t), 3); err != nil || !ok || next != 42 {
		t.Errorf("Checkpoint(3) = %d, %v, %v; want 42, true", next, ok, err)
	}
	if _, ok, err := tb.Checkpoint(ctxT(t), 4); err != nil || ok {
		t.Errorf("Checkpoint(4) = _, %v, %v; want false", ok, err)
	}
	// Both indexes list every document, in the contract's order.
	for _, ix := range orderSpec.Indexes {
		page, err := tb.Query(ctxT(t), engine.IndexQuery{Index: ix.Name, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		want := modelQuery(orderSpec, docs, engine.IndexQuery{Index: ix.Name, Limit: 100})
		if got, exp := showDocKeys(page.Docs), showDocKeys(want); got != exp {
			t.Errorf("Query(%s) = %s; want %s", ix.Name, got, exp)
		}
		for _, d := range page.Docs {
			if !sameDoc(d, loaded[string(d.Key)]) {
				t.Errorf("Query(%s) returned %+v; Load gave %+v", ix.Name, d, loaded[string(d.Key)])
			}
		}
	}
}

func TestTableKeyLayout(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r, WithPrefix("app1:"))
	tb := openTable(t, s, orderSpec)
	tapply(t, tb, 2, 8, odoc("k\x00", 2, 7, 1.5, "gold"))

	types := map[string]string{
		"app1:t:orders:spec":            "string",
		"app1:t:orders:d:6b00":          "hash",
		"app1:t:orders:i:total":         "zset",
		"app1:t:orders:i:tier":          "zset",
		"app1:t:orders:p:2:members":     "set",
		"app1:t:orders:p:2:checkpoint":  "string",
		"app1:t:orders:p:2:epoch":       "string",
		"app1:t:orders:p:2:batch":       "string",
		"app1:by-avg":                   "none",
		"app1:partition:2:epoch":        "none",
		"app1:t:orders:p:0:checkpoint":  "none",
		"app1:t:customers:p:2:epoch":    "none",
		"app1:t:orders:d:6b00:whatever": "none",
	}
	for key, want := range types {
		if got := redisCmd(t, r, "TYPE", key); got != want {
			t.Errorf("TYPE %s = %s, want %s", key, got, want)
		}
	}
	if got := redisCmd(t, r, "GET", "app1:t:orders:spec"); got != "1|total:number,tier:string" {
		t.Errorf("spec = %q", got)
	}
	for f, want := range map[string]string{"p": "2", "v": "7", "s": "2:7,7:1", "d": "v\x00\xffk\x00",
		"0": string(numberPrefix(1.5)), "1": "gold"} {
		if got := redisCmd(t, r, "HGET", "app1:t:orders:d:6b00", f); got != want {
			t.Errorf("HGET doc %s = %q, want %q", f, got, want)
		}
	}
	if got := redisCmd(t, r, "ZSCORE", "app1:t:orders:i:tier", "gold\x00k\x00"); got != "0" {
		t.Errorf("tier member score = %q, want 0", got)
	}
	if got := redisCmd(t, r, "ZSCORE", "app1:t:orders:i:total", string(numberPrefix(1.5))+"k\x00"); got != "0" {
		t.Errorf("total member score = %q, want 0", got)
	}
	// A new value moves the members instead of adding some.
	tapply(t, tb, 2, 9, odoc("k\x00", 2, 8, 3, "silver"))
	for _, ix := range []string{"total", "tier"} {
		if got := redisCmd(t, r, "ZCARD", "app1:t:orders:i:"+ix); got != "1" {
			t.Errorf("ZCARD %s after an update = %s, want 1", ix, got)
		}
	}
}

func TestTableNumberPrefixOrder(t *testing.T) {
	vals := []float64{math.Inf(-1), -math.MaxFloat64, -1e300, -2, -1, -math.SmallestNonzeroFloat64, 0,
		math.SmallestNonzeroFloat64, 0.5, 1, 1 + 1e-15, 3, 1 << 53, math.MaxFloat64, math.Inf(1)}
	for i := range vals {
		got, ok := decodeNumberPrefix(numberPrefix(vals[i]))
		if !ok || got != vals[i] {
			t.Errorf("decode(numberPrefix(%v)) = %v, %v", vals[i], got, ok)
		}
		if i > 0 && bytes.Compare(numberPrefix(vals[i-1]), numberPrefix(vals[i])) >= 0 {
			t.Errorf("numberPrefix(%v) does not sort before numberPrefix(%v)", vals[i-1], vals[i])
		}
	}
	if !bytes.Equal(numberPrefix(math.Copysign(0, -1)), numberPrefix(0)) {
		t.Error("-0 and +0 have different prefixes")
	}
	if _, ok := decodeNumberPrefix([]byte("short")); ok {
		t.Error("decodeNumberPrefix accepted 5 bytes")
	}
}

func TestTableSpecs(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r)
	tb := openTable(t, s, orderSpec)
	tapply(t, tb, 0, 1, odoc("a", 0, 1, 1, "x"))

	again := openTable(t, s, orderSpec)
	if d, err := again.Get(ctxT(t), []byte("a")); err != nil || d.Version != 1 {
		t.Fatalf("Get through a reopened table = %+v, %v", d, err)
	}
	for _, spec := range []engine.TableSpec{
		{Name: "orders"},
		{Name: "orders", Indexes: []engine.IndexSpec{{Name: "total", Kind: engine.IndexNumber}}},
		{Name: "orders", Indexes: []engine.IndexSpec{{Name: "tier", Kind: engine.IndexString}, {Name: "total", Kind: engine.IndexNumber}}},
		{Name: "orders", Indexes: []engine.IndexSpec{{Name: "total", Kind: engine.IndexString}, {Name: "tier", Kind: engine.IndexString}}},
	} {
		_, err := s.OpenTable(ctxT(t), spec)
		if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "total:number,tier:string") {
			t.Errorf("OpenTable(%+v) = %v; want ErrInvalid naming the stored indexes", spec.Indexes, err)
		}
	}
	for _, spec := range []engine.TableSpec{
		{Name: "Bad"},
		{Name: "orders", TiesAscending: true, Indexes: orderSpec.Indexes},
		{Name: "dup", Indexes: []engine.IndexSpec{{Name: "a", Kind: engine.IndexNumber}, {Name: "a", Kind: engine.IndexString}}},
	} {
		if _, err := s.OpenTable(ctxT(t), spec); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("OpenTable(%+v) = %v; want ErrInvalid", spec, err)
		}
	}
	// A table without indexes, and tables are independent.
	plain := openTable(t, s, engine.TableSpec{Name: "plain"})
	tapply(t, plain, 0, 5, engine.Doc{Key: []byte("a"), Partition: 0, Version: 1, Value: []byte("p")})
	if d, err := plain.Get(ctxT(t), []byte("a")); err != nil || string(d.Value) != "p" || d.Index != nil {
		t.Fatalf("Get on the plain table = %+v, %v", d, err)
	}
	if d, err := tb.Get(ctxT(t), []byte("a")); err != nil || d.Version != 1 || string(d.Value) != "v\x00\xffa" {
		t.Fatalf("Get on orders after writing plain = %+v, %v", d, err)
	}
	if next, _, _ := tb.Checkpoint(ctxT(t), 0); next != 1 {
		t.Errorf("orders checkpoint = %d after writing plain; want 1", next)
	}
	if _, err := plain.Query(ctxT(t), engine.IndexQuery{Index: "total", Limit: 1}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("Query of an undeclared index = %v; want ErrInvalid", err)
	}
}

func TestTableApplyRules(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r)
	tb := openTable(t, s, orderSpec)
	tapply(t, tb, 1, 10, odoc("a", 1, 5, 1, "x"), odoc("b", 1, 5, 2, "y"))
	e, err := tb.Claim(ctxT(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name string
		b    engine.DocBatch
		want error
	}{
		{"stale epoch", engine.DocBatch{Partition: 1, Epoch: e - 1, Checkpoint: 11, Docs: []engine.Doc{odoc("c", 1, 9, 0, "")}}, engine.ErrFenced},
		{"future epoch", engine.DocBatch{Partition: 1, Epoch: e + 1, Checkpoint: 11}, engine.ErrFenced},
		{"unclaimed partition", engine.DocBatch{Partition: 9, Epoch: 1, Checkpoint: 11}, engine.ErrFenced},
		{"same version", engine.DocBatch{Partition: 1, Epoch: e, Checkpoint: 11, Docs: []engine.Doc{odoc("c", 1, 9, 0, ""), odoc("a", 1, 5, 7, "z")}}, engine.ErrFenced},
		{"older version", engine.DocBatch{Partition: 1, Epoch: e, Checkpoint: 11, Docs: []engine.Doc{odoc("b", 1, 4, 7, "z")}}, engine.ErrFenced},
		{"wrong partition", engine.DocBatch{Partition: 1, Epoch: e, Checkpoint: 11, Docs: []engine.Doc{odoc("c", 2, 9, 0, "")}}, engine.ErrInvalid},
		{"NaN", engine.DocBatch{Partition: 1, Epoch: e, Checkpoint: 11, Docs: []engine.Doc{odoc("c", 1, 9, math.NaN(), "")}}, engine.ErrInvalid},
		{"NUL in string", engine.DocBatch{Partition: 1, Epoch: e, Checkpoint: 11, Docs: []engine.Doc{odoc("c", 1, 9, 1, "a\x00")}}, engine.ErrInvalid},
		{"empty key", engine.DocBatch{Partition: 1, Epoch: e, Checkpoint: 11, Docs: []engine.Doc{odoc("", 1, 9, 1, "")}}, engine.ErrInvalid},
		{"missing index value", engine.DocBatch{Partition: 1, Epoch: e, Checkpoint: 11, Docs: []engine.Doc{{Key: []byte("c"), Partition: 1, Version: 9}}}, engine.ErrInvalid},
	}
	for _, tc := range refused {
		if err := tb.Apply(ctxT(t), tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: Apply = %v; want %v", tc.name, err, tc.want)
		}
	}
	wantKeys(t, tb, engine.IndexQuery{Index: "tier", Limit: 10}, "a", "b")
	if next, _, _ := tb.Checkpoint(ctxT(t), 1); next != 10 {
		t.Errorf("checkpoint after refused batches = %d, want 10", next)
	}
	// Replay skips the stale documents and applies the rest.
	err = tb.Apply(ctxT(t), engine.DocBatch{Partition: 1, Epoch: e, Checkpoint: 12, Replay: true,
		Docs: []engine.Doc{odoc("a", 1, 5, 9, "stale"), odoc("b", 1, 6, -1, "new"), odoc("c", 1, 1, 3, "c")}})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	wantKeys(t, tb, engine.IndexQuery{Index: "total", Limit: 10}, "b", "a", "c")
	wantKeys(t, tb, engine.IndexQuery{Index: "tier", Limit: 10}, "c", "b", "a")
	// One key twice in a batch: the later version wins, no stale members.
	tapply(t, tb, 1, 13, odoc("a", 1, 7, 100, "m"), odoc("a", 1, 8, 50, "n"))
	wantKeys(t, tb, engine.IndexQuery{Index: "total", Desc: true, Limit: 10}, "a", "c", "b")
	if got := redisCmd(t, r, "ZCARD", tb.keys.index(0, "tier")); got != "3" {
		t.Errorf("ZCARD tier = %s, want 3", got)
	}
	// An empty batch moves the checkpoint and confirms the claim.
	e, _ = tb.Claim(ctxT(t), 1)
	if err := tb.Apply(ctxT(t), engine.DocBatch{Partition: 1, Epoch: e, Checkpoint: 99}); err != nil {
		t.Fatal(err)
	}
	if next, _, _ := tb.Checkpoint(ctxT(t), 1); next != 99 {
		t.Errorf("checkpoint after an empty batch = %d, want 99", next)
	}
}

// wantKeys runs q and compares the keys of the page.
func wantKeys(t *testing.T, tb engine.Table, q engine.IndexQuery, keys ...string) {
	t.Helper()
	page, err := tb.Query(ctxT(t), q)
	if err != nil {
		t.Fatalf("Query(%+v): %v", q, err)
	}
	var got []string
	for _, d := range page.Docs {
		got = append(got, string(d.Key))
	}
	if strings.Join(got, ",") != strings.Join(keys, ",") {
		t.Errorf("Query(%s desc=%v) = %q; want %q", q.Index, q.Desc, got, keys)
	}
}

func showDocKeys(docs []engine.Doc) string {
	var b strings.Builder
	for _, d := range docs {
		fmt.Fprintf(&b, "%x ", d.Key)
	}
	return b.String()
}

func TestTableRedisLosesData(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r)
	tb := openTable(t, s, orderSpec)
	tapply(t, tb, 0, 5, odoc("a", 0, 1, 1, "x"))
	e, err := tb.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	redisCmd(t, r, "FLUSHALL")
	err = tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 6, Docs: []engine.Doc{odoc("b", 0, 2, 2, "y")}})
	if !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("Apply after FLUSHALL = %v; want ErrFenced", err)
	}
	if n := redisCmd(t, r, "DBSIZE"); n != "0" {
		t.Errorf("the fenced batch wrote %s keys", n)
	}
	if _, ok, err := tb.Checkpoint(ctxT(t), 0); err != nil || ok {
		t.Fatalf("Checkpoint after FLUSHALL = %v, %v; want none", ok, err)
	}
	// A new claim stores the spec again: the table keeps refusing other indexes.
	tapply(t, tb, 0, 1, odoc("b", 0, 2, 2, "y"))
	if _, err := s.OpenTable(ctxT(t), engine.TableSpec{Name: "orders"}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("OpenTable with other indexes after the flush = %v; want ErrInvalid", err)
	}
	redisCmd(t, r, "FLUSHALL")
	other := openTable(t, s, engine.TableSpec{Name: "orders"}) // Redis forgot the spec
	if _, err := tb.Claim(ctxT(t), 0); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("Claim after the table was redefined = %v; want ErrInvalid", err)
	}
	if _, err := other.Claim(ctxT(t), 0); err != nil {
		t.Errorf("Claim of the redefined table: %v", err)
	}
}

func TestTableDropScanReset(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r)
	tb := openTable(t, s, orderSpec)
	other := openTable(t, s, engine.TableSpec{Name: "other", Indexes: []engine.IndexSpec{{Name: "epoch", Kind: engine.IndexNumber}}})
	var p0 []engine.Doc
	for i := range 2500 { // several SSCAN pages
		p0 = append(p0, odoc("k"+strconv.Itoa(i), 0, 1, float64(i%7), strconv.Itoa(i%3)))
	}
	tapply(t, tb, 0, 10, p0...)
	tapply(t, tb, 1, 20, odoc("x\x00", 1, 1, 1, "x"))
	tapply(t, other, 0, 30, engine.Doc{Key: []byte("o"), Partition: 0, Version: 1, Index: []engine.IndexValue{engine.Num(1)}})

	seen := map[string]bool{}
	err := tb.ScanPartition(ctxT(t), 0, func(d engine.Doc) error {
		if seen[string(d.Key)] || d.Partition != 0 {
			return fmt.Errorf("key %q twice or in partition %d", d.Key, d.Partition)
		}
		seen[string(d.Key)] = true
		return nil
	})
	if err != nil || len(seen) != len(p0) {
		t.Fatalf("ScanPartition(0) = %v after %d documents; want %d", err, len(seen), len(p0))
	}
	stop := errors.New("stop")
	if err := tb.ScanPartition(ctxT(t), 1, func(engine.Doc) error { return stop }); err != stop {
		t.Errorf("ScanPartition returned %v; want fn's error as is", err)
	}

	if err := tb.DropPartition(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, tb, engine.IndexQuery{Index: "total", Limit: 10}, "x\x00")
	wantKeys(t, tb, engine.IndexQuery{Index: "tier", Limit: 10}, "x\x00")
	if _, ok, _ := tb.Checkpoint(ctxT(t), 0); ok {
		t.Error("checkpoint of a dropped partition survived")
	}
	if n := redisCmd(t, r, "EVAL", "return #redis.call('KEYS', ARGV[1])", "0", tb.keys.docPrefix(0)+"*"); n != "1" {
		t.Errorf("%s document hashes left after the drop, want 1", n)
	}
	e0, _ := tb.Claim(ctxT(t), 0)

	if err := tb.Reset(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Get(ctxT(t), []byte("x\x00")); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get after Reset = %v; want ErrNotFound", err)
	}
	wantKeys(t, tb, engine.IndexQuery{Index: "tier", Limit: 10})
	if e, _ := tb.Claim(ctxT(t), 0); e <= e0 {
		t.Errorf("Claim after Reset = %d; want above %d", e, e0)
	}
	if _, err := other.Get(ctxT(t), []byte("o")); err != nil {
		t.Errorf("another table after Reset: %v", err)
	}
	tapply(t, tb, 0, 11, odoc("again", 0, 1, 1, "x"))
	if d, err := tb.Get(ctxT(t), []byte("again")); err != nil || d.Version != 1 {
		t.Errorf("Get of a document written after Reset = %+v, %v", d, err)
	}
}
