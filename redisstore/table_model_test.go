package redisstore

import (
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// modelQuery answers q over docs the slow way, with the contract's own
// order (TableSpec.Before) and bounds (IndexQuery.InRange).
func modelQuery(spec engine.TableSpec, docs []engine.Doc, q engine.IndexQuery) []engine.Doc {
	pos, kind, err := q.Validate(spec)
	if err != nil {
		return nil
	}
	cur := func(d engine.Doc) engine.IndexCursor { return engine.IndexCursor{Value: d.Index[pos], Key: d.Key} }
	var out []engine.Doc
	for _, d := range docs {
		if !q.InRange(d.Index[pos], kind) {
			continue
		}
		if q.After != nil && !spec.Before(*q.After, cur(d), kind, q.Desc) {
			continue
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b engine.Doc) int {
		if spec.Before(cur(a), cur(b), kind, q.Desc) {
			return -1
		}
		return 1
	})
	return out[:min(len(out), q.Limit)]
}

// TestTableQueryModel writes random documents (many ties, binary keys,
// strings that are prefixes of each other, -0) and compares random
// queries, paged to the end, with modelQuery, with and without
// TiesAscending.
func TestTableQueryModel(t *testing.T) {
	r := testkit.StartRedis(t)
	ties := orderSpec
	ties.Name, ties.TiesAscending = "ranked", true
	for _, spec := range []engine.TableSpec{orderSpec, ties} {
		t.Run(spec.Name, func(t *testing.T) { testQueryModel(t, openTable(t, openStore(t, r), spec)) })
	}
}

func testQueryModel(t *testing.T, tb *table) {
	spec := tb.Spec()
	rng := rand.New(rand.NewPCG(7, 11))
	nums := []float64{-math.MaxFloat64, -1e300, -3, -1, math.Copysign(0, -1), 0, 0.1, 1, 1, 2.5, 1 << 53, math.MaxFloat64}
	strs := []string{"", "a", "a\x01", "ab", "abc", "b", "é", "\x7f", "zz"}
	keyBytes := []byte{0, 1, 'a', 'b', 0xfe, 0xff}
	randKey := func() []byte {
		k := make([]byte, 1+rng.IntN(3))
		for i := range k {
			k[i] = keyBytes[rng.IntN(len(keyBytes))]
		}
		return k
	}
	model := map[string]engine.Doc{}
	version := int64(0)
	for round := range 6 {
		var batch []engine.Doc
		for range 60 {
			version++
			k := randKey()
			d := engine.Doc{Key: k, Partition: 0, Version: version, Value: []byte{byte(round)},
				Index: []engine.IndexValue{engine.Num(nums[rng.IntN(len(nums))]), engine.Str(strs[rng.IntN(len(strs))])}}
			batch = append(batch, d)
			model[string(k)] = d
		}
		tapply(t, tb, 0, version, batch...)
	}
	docs := make([]engine.Doc, 0, len(model))
	for _, d := range model {
		docs = append(docs, d)
	}
	t.Logf("%d documents", len(docs))

	randValue := func(kind engine.IndexKind) engine.IndexValue {
		if kind == engine.IndexNumber {
			if rng.IntN(8) == 0 {
				return engine.Num(math.Inf(1 - 2*rng.IntN(2)))
			}
			return engine.Num(nums[rng.IntN(len(nums))] + float64(rng.IntN(3)-1)*0.05)
		}
		s := strs[rng.IntN(len(strs))]
		switch rng.IntN(6) {
		case 0:
			s += "\x00" + strs[rng.IntN(len(strs))] // a bound no stored value can equal
		case 1:
			s += "a"
		}
		return engine.Str(s)
	}
	for i := range 400 {
		ix := spec.Indexes[rng.IntN(2)]
		q := engine.IndexQuery{Index: ix.Name, Desc: rng.IntN(2) == 0, Limit: 1 + rng.IntN(40)}
		if rng.IntN(2) == 0 {
			q.Min, q.HasMin = randValue(ix.Kind), true
		}
		if rng.IntN(2) == 0 {
			q.Max, q.HasMax = randValue(ix.Kind), true
		}
		if rng.IntN(3) == 0 {
			k := randKey()
			if rng.IntN(4) == 0 {
				k = nil
			}
			q.After = &engine.IndexCursor{Value: randValue(ix.Kind), Key: k}
		}
		for pages := 0; ; pages++ {
			want := modelQuery(spec, docs, q)
			page, err := tb.Query(ctxT(t), q)
			if err != nil {
				t.Fatalf("query %d: %v", i, err)
			}
			if got, exp := showDocKeys(page.Docs), showDocKeys(want); got != exp {
				t.Fatalf("query %d %+v (after %+v) page %d:\n got %s\nwant %s", i, q, q.After, pages, got, exp)
			}
			for _, d := range page.Docs {
				if m := model[string(d.Key)]; !sameDoc(d, m) {
					t.Fatalf("query %d returned %+v; stored %+v", i, d, m)
				}
			}
			if (page.Next != nil) != (len(want) == q.Limit) {
				t.Fatalf("query %d: Next = %v with %d of limit %d", i, page.Next, len(want), q.Limit)
			}
			if page.Next == nil {
				break
			}
			q.After = page.Next
		}
	}
}

var hmgetCalls = regexp.MustCompile(`cmdstat_hmget:calls=(\d+)`)

var zrangeCalls = regexp.MustCompile(`cmdstat_zrange:calls=(\d+)`)

// TestTableQueryPushdown checks that a page of 10 from 20,000 documents
// (200 per number value, 2,000 per string value) reads about 10
// documents, as Redis counts the scripts' HMGET calls, with and without
// TiesAscending.
func TestTableQueryPushdown(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r)
	ties := orderSpec
	ties.Name, ties.TiesAscending = "ranked", true
	for _, spec := range []engine.TableSpec{orderSpec, ties} {
		t.Run(spec.Name, func(t *testing.T) { testPushdown(t, r, openTable(t, s, spec)) })
	}
}

func testPushdown(t *testing.T, r *testkit.Redis, tb *table) {
	const n, chunk = 20000, 1000
	for first := 0; first < n; first += chunk {
		batch := make([]engine.Doc, 0, chunk)
		for i := first; i < first+chunk; i++ {
			batch = append(batch, odoc("key-"+strconv.Itoa(i), 0, 1, float64(i%100), strconv.Itoa(i%10)))
		}
		tapply(t, tb, 0, int64(first), batch...)
	}
	calls := func(re *regexp.Regexp) int {
		m := re.FindStringSubmatch(redisCmd(t, r, "INFO", "commandstats"))
		if m == nil {
			return 0
		}
		c, _ := strconv.Atoi(m[1])
		return c
	}
	queries := []engine.IndexQuery{
		{Index: "total", Limit: 10},
		{Index: "total", Desc: true, Limit: 10},
		{Index: "total", Min: engine.Num(50), Max: engine.Num(50), HasMin: true, HasMax: true, Limit: 10,
			After: &engine.IndexCursor{Value: engine.Num(50), Key: []byte("key-5050")}},
		{Index: "total", Desc: true, Max: engine.Num(50), HasMax: true, Limit: 10,
			After: &engine.IndexCursor{Value: engine.Num(40), Key: []byte("key-5040")}},
		{Index: "tier", Min: engine.Str("3"), HasMin: true, Desc: true, Limit: 10},
		{Index: "tier", Desc: true, Limit: 10, After: &engine.IndexCursor{Value: engine.Str("7"), Key: []byte("key-9997")}},
	}
	for _, q := range queries {
		redisCmd(t, r, "CONFIG", "RESETSTAT")
		page, err := tb.Query(ctxT(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Docs) != 10 || page.Next == nil {
			t.Fatalf("Query(%+v) returned %d documents, Next %v; want a full page", q, len(page.Docs), page.Next)
		}
		if c := calls(hmgetCalls); c > 10 {
			t.Errorf("Query(%+v) read %d documents (HMGET calls), want at most 10", q, c)
		}
		if c := calls(zrangeCalls); c > 2*10+1 {
			t.Errorf("Query(%+v) ran %d ZRANGE calls, want at most 21", q, c)
		}
	}
}
