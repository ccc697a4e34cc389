package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// docOut is one document as a client decodes it.
type docOut struct {
	Table     string         `json:"table"`
	Key       string         `json:"key"`
	Partition int32          `json:"partition"`
	Version   int64          `json:"version"`
	Value     map[string]any `json:"value"`
	Index     map[string]any `json:"index"`
}

// pageOut is a query page as a client decodes it.
type pageOut struct {
	Table             string   `json:"table"`
	Index             string   `json:"index"`
	Items             []docOut `json:"items"`
	Next              string   `json:"next"`
	Partial           bool     `json:"partial"`
	MissingPartitions []int32  `json:"missingPartitions"`
}

// wantDoc is what the API must show for d of f.
func wantDoc(t *testing.T, f *fakeTable, d engine.Doc) docOut {
	t.Helper()
	out := docOut{Table: f.spec.Name, Key: f.FormatKey(d.Key), Partition: d.Partition, Version: d.Version, Index: map[string]any{}}
	if err := json.Unmarshal(d.Value, &out.Value); err != nil {
		t.Fatal(err)
	}
	for i, ix := range f.spec.Indexes {
		if ix.Kind == engine.IndexNumber {
			out.Index[ix.Name] = d.Index[i].Num
		} else {
			out.Index[ix.Name] = d.Index[i].Str
		}
	}
	return out
}

// fetcher asks one server for target and returns status and body.
type fetcher func(t *testing.T, target string) (int, []byte)

func handlerFetcher(h http.Handler) fetcher {
	return func(t *testing.T, target string) (int, []byte) {
		t.Helper()
		rec := get(t, h, target)
		return rec.Code, rec.Body.Bytes()
	}
}

func decodeStrictT[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	if err := decodeStrict(body, &v); err != nil {
		t.Fatalf("decode %T from %.300q: %v", v, body, err)
	}
	return v
}

// pageAll follows next from the first page of params and returns every
// item, checking each page holds at most limit items.
func pageAll(t *testing.T, fetch fetcher, table string, params url.Values, limit int) []docOut {
	t.Helper()
	params.Set("limit", fmt.Sprint(limit))
	var all []docOut
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("more than 1000 pages")
		}
		code, body := fetch(t, "/tables/"+table+"?"+params.Encode())
		if code != http.StatusOK {
			t.Fatalf("page %d of %s: %d %s", pages, params.Encode(), code, body)
		}
		page := decodeStrictT[pageOut](t, body)
		if page.Partial || page.Table != table || page.Index != params.Get("index") || len(page.Items) > limit {
			t.Fatalf("page %d: table %q index %q partial %v, %d items (limit %d)", pages, page.Table, page.Index, page.Partial, len(page.Items), limit)
		}
		all = append(all, page.Items...)
		if page.Next == "" {
			return all
		}
		params.Set("after", page.Next)
	}
}

// checkQuery runs q (as params) against fetch with each page size of
// limits (1, 7 and 1000 when none) and compares the concatenated pages
// with wantOrder: every document exactly once, in order.
func checkQuery(t *testing.T, fetch fetcher, f *fakeTable, params url.Values, q engine.IndexQuery, limits ...int) {
	t.Helper()
	want := wantOrder(f, q)
	if len(limits) == 0 {
		limits = []int{1, 7, 1000}
	}
	for _, limit := range limits {
		got := pageAll(t, fetch, f.spec.Name, cloneValues(params), limit)
		if len(got) != len(want) {
			t.Fatalf("%s limit %d: %d documents, want %d", params.Encode(), limit, len(got), len(want))
		}
		for i := range want {
			if w := wantDoc(t, f, want[i]); !reflect.DeepEqual(got[i], w) {
				t.Fatalf("%s limit %d: item %d = %+v, want %+v", params.Encode(), limit, i, got[i], w)
			}
		}
	}
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

func TestListTables(t *testing.T) {
	h := New(Options{Tables: []Table{customers(3), scores(3)}}).Handler()
	rec := get(t, h, "/tables")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	want := `{"tables":[` +
		`{"name":"customers","key":"string","indexes":[{"name":"total","kind":"number"},{"name":"tier","kind":"string"}],` +
		`"routes":{"get":"/tables/customers/{key}","query":"/tables/customers{?index,min,max,eq,order,limit,after}"}},` +
		`{"name":"scores","key":"int64","indexes":[{"name":"score","kind":"number"}],` +
		`"routes":{"get":"/tables/scores/{key}","query":"/tables/scores{?index,min,max,eq,order,limit,after}"}}]}`
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Errorf("GET /tables =\n%s\nwant\n%s", got, want)
	}
	if got := strings.TrimSpace(get(t, New(Options{}).Handler(), "/tables").Body.String()); got != `{"tables":[]}` {
		t.Errorf("no tables: %s", got)
	}
}

func TestGetTableDoc(t *testing.T) {
	cs, sc := customers(40), scores(40)
	h := New(Options{Tables: []Table{cs, sc}}).Handler()
	for _, f := range []*fakeTable{cs, sc} {
		for _, d := range f.docs {
			target := "/tables/" + f.spec.Name + "/" + url.PathEscape(f.FormatKey(d.Key))
			rec := get(t, h, target)
			if rec.Code != http.StatusOK {
				t.Fatalf("GET %s = %d %s", target, rec.Code, rec.Body.String())
			}
			if got, want := decode[docOut](t, rec), wantDoc(t, f, d); !reflect.DeepEqual(got, want) {
				t.Fatalf("GET %s = %+v, want %+v", target, got, want)
			}
		}
	}
	// The exact shape: members in order, index values in the spec's
	// order, HTML in values escaped.
	c1, _ := cs.find([]byte("c001"))
	rec := get(t, h, "/tables/customers/c001")
	want := fmt.Sprintf(`{"table":"customers","key":"c001","partition":%d,"version":10,`+
		`"value":{"orders":1,"total":147,"note":"\u003cb\u003e\u0026\u003c/b\u003e"},"index":{"total":147,"tier":"silver"}}`, c1.Partition)
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Errorf("body\n%s\nwant\n%s", got, want)
	}
	// A key with a slash is one escaped path segment.
	slash := "a/b c007"
	if rec := get(t, h, "/tables/customers/"+url.PathEscape(slash)); rec.Code != http.StatusOK || decode[docOut](t, rec).Key != slash {
		t.Errorf("key %q: %d %s", slash, rec.Code, rec.Body.String())
	}
	// A non-canonical int64 key is read as the number.
	for _, d := range sc.docs {
		if id := sc.FormatKey(d.Key); id[0] != '-' {
			rec := get(t, h, "/tables/scores/%2B0"+id)
			if rec.Code != http.StatusOK || decode[docOut](t, rec).Key != id {
				t.Errorf("key +0%s: %d %s", id, rec.Code, rec.Body.String())
			}
			break
		}
	}
}

func TestGetTableDocErrors(t *testing.T) {
	h := New(Options{Tables: []Table{customers(10), scores(10)}}).Handler()
	tests := []struct {
		name, target string
		status       int
		parts        []string
	}{
		{"absent string key", "/tables/customers/nobody", 404, []string{`key "nobody" not found in table customers`}},
		{"absent int key", "/tables/scores/123456", 404, []string{"123456", "scores"}},
		{"unknown table", "/tables/orders/1", 404, []string{`table "orders" not found`}},
		{"bad int key", "/tables/scores/abc", 400, []string{"parameter key", `"abc"`, "int64"}},
		{"int key overflow", "/tables/scores/9223372036854775808", 400, []string{"parameter key"}},
		{"bad utf-8 key", "/tables/customers/%FF", 400, []string{"parameter key", "string"}},
		{"long bad key", "/tables/scores/" + strings.Repeat("9", 5000) + "x", 400, []string{"parameter key"}},
		{"extra segment", "/tables/customers/a/b", 404, []string{"no route"}},
		{"empty key", "/tables/customers/", 404, []string{"no route"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := wantJSONError(t, get(t, h, tc.target), tc.status, tc.parts...)
			if len(body.Error) > 200 {
				t.Errorf("error of %d bytes", len(body.Error))
			}
		})
	}
}

func TestQueryTable(t *testing.T) {
	cs, sc := customers(60), scores(60)
	fetch := handlerFetcher(New(Options{Tables: []Table{cs, sc}}).Handler())
	num, str := engine.Num, engine.Str
	tests := []struct {
		f      *fakeTable
		params string
		q      engine.IndexQuery
	}{
		{cs, "index=total", engine.IndexQuery{Index: "total"}},
		{cs, "index=total&order=desc", engine.IndexQuery{Index: "total", Desc: true}},
		{cs, "index=total&order=asc&min=100&max=200", engine.IndexQuery{Index: "total", Min: num(100), Max: num(200), HasMin: true, HasMax: true}},
		{cs, "index=total&min=105&order=desc", engine.IndexQuery{Index: "total", Min: num(105), HasMin: true, Desc: true}},
		{cs, "index=total&max=52.5", engine.IndexQuery{Index: "total", Max: num(52.5), HasMax: true}},
		{cs, "index=total&eq=52.5", engine.IndexQuery{Index: "total", Min: num(52.5), Max: num(52.5), HasMin: true, HasMax: true}},
		{cs, "index=total&eq=52.5&order=desc", engine.IndexQuery{Index: "total", Min: num(52.5), Max: num(52.5), HasMin: true, HasMax: true, Desc: true}},
		{cs, "index=total&min=1e9", engine.IndexQuery{Index: "total", Min: num(1e9), HasMin: true}},
		{cs, "index=tier", engine.IndexQuery{Index: "tier"}},
		{cs, "index=tier&order=desc&min=gold", engine.IndexQuery{Index: "tier", Min: str("gold"), HasMin: true, Desc: true}},
		{cs, "index=tier&eq=platinum+%E2%9C%93", engine.IndexQuery{Index: "tier", Min: str("platinum ✓"), Max: str("platinum ✓"), HasMin: true, HasMax: true}},
		{cs, "index=tier&min=c&max=h", engine.IndexQuery{Index: "tier", Min: str("c"), Max: str("h"), HasMin: true, HasMax: true}},
		{cs, "index=tier&min=&max=&eq=&order=&limit=&after=", engine.IndexQuery{Index: "tier"}},
		{sc, "index=score", engine.IndexQuery{Index: "score"}},
		{sc, "index=score&order=desc", engine.IndexQuery{Index: "score", Desc: true}},
		{sc, "index=score&min=-2&max=2&order=desc", engine.IndexQuery{Index: "score", Min: num(-2), Max: num(2), HasMin: true, HasMax: true, Desc: true}},
		{sc, "index=score&eq=-4", engine.IndexQuery{Index: "score", Min: num(-4), Max: num(-4), HasMin: true, HasMax: true}},
	}
	for _, tc := range tests {
		t.Run(tc.f.spec.Name+"?"+tc.params, func(t *testing.T) {
			params, err := url.ParseQuery(tc.params)
			if err != nil {
				t.Fatal(err)
			}
			checkQuery(t, fetch, tc.f, params, tc.q)
			if n := len(wantOrder(tc.f, tc.q)); n == 0 && !strings.Contains(tc.params, "1e9") {
				t.Errorf("the query selects nothing: a weak test")
			}
		})
	}
	// The defaults reach the table: limit 50, ascending.
	code, body := fetch(t, "/tables/customers?index=total")
	if code != http.StatusOK || len(decodeStrictT[pageOut](t, body).Items) != DefaultLimit {
		t.Errorf("default page: %d, want %d items", code, DefaultLimit)
	}
	if q, ok := cs.lastQuery(); !ok || q.Limit != DefaultLimit || q.Desc || q.HasMin || q.HasMax || q.After != nil {
		t.Errorf("default query reached the table as %+v", q)
	}
	// An empty answer is an empty list and no next.
	if code, body := fetch(t, "/tables/customers?index=total&min=1e9"); code != http.StatusOK || strings.TrimSpace(string(body)) != `{"table":"customers","index":"total","items":[]}` {
		t.Errorf("empty page: %d %s", code, body)
	}
}

func TestQueryTableBadParams(t *testing.T) {
	cs := customers(20)
	h := New(Options{Tables: []Table{cs, scores(3), newFakeTable(engine.TableSpec{Name: "plain"}, false, 1, nil)}}).Handler()
	totalCur := encodeTableCursor("customers", "total", engine.IndexNumber, engine.IndexCursor{Value: engine.Num(5), Key: []byte("c001")})
	tierCur := encodeTableCursor("customers", "tier", engine.IndexString, engine.IndexCursor{Value: engine.Str("gold"), Key: []byte("c001")})
	scoreCur := encodeTableCursor("scores", "score", engine.IndexNumber, engine.IndexCursor{Value: engine.Num(5), Key: []byte("c001")})
	long := strings.Repeat("x", engine.MaxIndexStringBytes+1)
	tests := []struct {
		name, target string
		status       int
		parts        []string
	}{
		{"unknown table", "/tables/orders?index=total", 404, []string{`table "orders" not found`}},
		{"no index", "/tables/customers", 400, []string{"parameter index", "total, tier"}},
		{"unknown index", "/tables/customers?index=age", 400, []string{"parameter index", `"age"`, "total, tier"}},
		{"table without indexes", "/tables/plain?index=x", 400, []string{"parameter index", "no index"}},
		{"NaN", "/tables/customers?index=total&min=NaN", 400, []string{"parameter min", "finite"}},
		{"Inf", "/tables/customers?index=total&max=Inf", 400, []string{"parameter max", "finite"}},
		{"overflow", "/tables/customers?index=total&eq=1e400", 400, []string{"parameter eq", "finite"}},
		{"not a number", "/tables/customers?index=total&min=ten", 400, []string{"parameter min", `"ten"`}},
		{"eq with min", "/tables/customers?index=total&eq=1&min=0", 400, []string{"parameter eq", "excludes min and max"}},
		{"eq with max", "/tables/customers?index=tier&eq=gold&max=z", 400, []string{"parameter eq"}},
		{"min above max", "/tables/customers?index=total&min=5&max=4", 400, []string{"min and max", "above"}},
		{"string min above max", "/tables/customers?index=tier&min=s&max=b", 400, []string{"min and max"}},
		{"long string", "/tables/customers?index=tier&min=" + long, 400, []string{"parameter min", "512"}},
		{"bad utf-8", "/tables/customers?index=tier&max=%FF", 400, []string{"parameter max", "UTF-8"}},
		{"NUL", "/tables/customers?index=tier&eq=a%00b", 400, []string{"parameter eq", "NUL"}},
		{"order", "/tables/customers?index=total&order=up", 400, []string{"parameter order", `"up"`}},
		{"limit 0", "/tables/customers?index=total&limit=0", 400, []string{"parameter limit", "out of range"}},
		{"limit too large", "/tables/customers?index=total&limit=1001", 400, []string{"parameter limit", "1 to 1000"}},
		{"limit not a number", "/tables/customers?index=total&limit=ten", 400, []string{"parameter limit", `"ten"`}},
		{"repeated", "/tables/customers?index=total&limit=1&limit=2", 400, []string{"parameter limit", "2 times"}},
		{"repeated index", "/tables/customers?index=total&index=tier", 400, []string{"parameter index", "2 times"}},
		{"garbage cursor", "/tables/customers?index=total&after=garbage", 400, []string{"parameter after"}},
		{"movie cursor", "/tables/customers?index=total&after=" + encodeCursor(engine.IndexCursor{Value: engine.Num(1), Key: movies.Key(2)}), 400, []string{"parameter after"}},
		{"cursor of another index", "/tables/customers?index=total&after=" + tierCur, 400, []string{"parameter after"}},
		{"cursor of another table", "/tables/customers?index=total&after=" + scoreCur, 400, []string{"parameter after"}},
		{"edited cursor", "/tables/customers?index=total&after=" + editCursor(totalCur), 400, []string{"parameter after"}},
		{"broken escape", "/tables/customers?index=total&after=%%%zz", 400, []string{"query string"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := cs.queryCount()
			body := wantJSONError(t, get(t, h, tc.target), tc.status, tc.parts...)
			if len(body.Error) > 300 {
				t.Errorf("error of %d bytes: %q", len(body.Error), body.Error)
			}
			if cs.queryCount() != before {
				t.Errorf("a refused query reached the table")
			}
		})
	}
	if rec := get(t, h, "/tables/customers?index=total&after="+totalCur); rec.Code != http.StatusOK {
		t.Errorf("a valid cursor: %d %s", rec.Code, rec.Body.String())
	}
}

// editCursor flips one character of an opaque cursor.
func editCursor(c string) string {
	b := []byte(c)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

func TestTableStoreErrors(t *testing.T) {
	cs := customers(10)
	s := New(Options{Tables: []Table{cs}, QueryTimeout: time.Second})
	h := s.Handler()
	key := "/tables/customers/" + url.PathEscape(string(cs.docs[0].Key))

	cs.fail(fmt.Errorf("redis down: %w", engine.ErrUnavailable))
	for _, target := range []string{key, "/tables/customers?index=total"} {
		rec := get(t, h, target)
		wantJSONError(t, rec, http.StatusServiceUnavailable, "unavailable")
		if rec.Header().Get("Retry-After") == "" {
			t.Errorf("%s: 503 without Retry-After", target)
		}
	}
	cs.fail(context.DeadlineExceeded)
	wantJSONError(t, get(t, h, key), http.StatusServiceUnavailable, "timed out")
	cs.fail(errors.New("disk on fire"))
	body := wantJSONError(t, get(t, h, "/tables/customers?index=total"), http.StatusInternalServerError)
	if strings.Contains(body.Error, "disk") {
		t.Errorf("a 500 leaks the cause: %q", body.Error)
	}
	cs.fail(nil)

	cs.mu.Lock()
	cs.badValue = true
	cs.mu.Unlock()
	wantJSONError(t, get(t, h, key), http.StatusInternalServerError, "internal server error")
	wantJSONError(t, get(t, h, "/tables/customers?index=total"), http.StatusInternalServerError)

	if rec := do(t, h, http.MethodHead, "/tables/customers?index=total&limit=0"); rec.Code != http.StatusBadRequest || rec.Body.Len() != 0 {
		t.Errorf("HEAD with a bad parameter: %d, %d-byte body", rec.Code, rec.Body.Len())
	}
	if rec := get(t, h, "/tables"); rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("security headers missing")
	}
}

func TestTableCursor(t *testing.T) {
	for _, c := range []struct {
		kind engine.IndexKind
		cur  engine.IndexCursor
	}{
		{engine.IndexNumber, engine.IndexCursor{Value: engine.Num(-1.5), Key: []byte{0}}},
		{engine.IndexNumber, engine.IndexCursor{Value: engine.Num(1e308), Key: []byte(strings.Repeat("k", engine.MaxKeyBytes))}},
		{engine.IndexString, engine.IndexCursor{Value: engine.Str(""), Key: []byte("a/b")}},
		{engine.IndexString, engine.IndexCursor{Value: engine.Str(strings.Repeat("é", engine.MaxIndexStringBytes/2)), Key: []byte{0xff, 0}}},
	} {
		s := encodeTableCursor("t", "ix", c.kind, c.cur)
		got, err := decodeTableCursor("t", "ix", c.kind, s)
		if err != nil || !reflect.DeepEqual(got, c.cur) {
			t.Errorf("round trip of %+v: %+v, %v", c.cur, got, err)
		}
		for _, other := range [][2]string{{"u", "ix"}, {"t", "iy"}, {"tix", ""}} {
			if _, err := decodeTableCursor(other[0], other[1], c.kind, s); err == nil {
				t.Errorf("cursor of t/ix accepted for %s/%s", other[0], other[1])
			}
		}
		if _, err := decodeTableCursor("t", "ix", 3-c.kind, s); err == nil {
			t.Errorf("cursor of kind %v accepted for the other kind", c.kind)
		}
		for cut := 1; cut < len(s); cut += 7 {
			if _, err := decodeTableCursor("t", "ix", c.kind, s[:cut]); err == nil {
				t.Errorf("truncated cursor %q accepted", s[:cut])
			}
		}
	}
}
