package web

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// tableNode is one instance of a table test cluster: a Server on a real
// socket with its own copy of each table.
type tableNode struct {
	addr   string
	tables map[string]*fakeTable
	hits   atomic.Int64
}

// tableCluster starts n Servers over a 6-partition ownership (partition p
// owned by node p%n), each holding every document of tables.
func tableCluster(t *testing.T, secret string, n int, tables ...*fakeTable) []*tableNode {
	t.Helper()
	return tableClusterOf(t, secret, n, func(nd *tableNode, owners map[int32]string) []Table {
		var ts []Table
		for _, f := range tables {
			c := f.clone()
			c.setOwners(nd.addr, owners)
			nd.tables[f.spec.Name] = c
			ts = append(ts, c)
		}
		return ts
	})
}

// tableClusterOf starts n Servers on sockets over a 6-partition ownership
// (partition p owned by node p%n), each with the tables build returns for
// it.
func tableClusterOf(t *testing.T, secret string, n int, build func(nd *tableNode, owners map[int32]string) []Table) []*tableNode {
	t.Helper()
	lns := make([]net.Listener, n)
	nodes := make([]*tableNode, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		nodes[i] = &tableNode{addr: ln.Addr().String(), tables: map[string]*fakeTable{}}
	}
	owners := map[int32]string{}
	for p := int32(0); p < 6; p++ {
		owners[p] = nodes[int(p)%n].addr
	}
	for i, nd := range nodes {
		h := New(Options{Tables: build(nd, owners), PeerSecret: []byte(secret)}).Handler()
		counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			nd.hits.Add(1)
			h.ServeHTTP(w, r)
		})
		srv := &http.Server{Handler: counted, ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(lns[i]) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	return nodes
}

// socketFetcher asks the instance at addr over HTTP.
func socketFetcher(addr string) fetcher {
	return func(t *testing.T, target string) (int, []byte) {
		t.Helper()
		code, _, body := getJSON(t, "http://"+addr+target, nil)
		return code, body
	}
}

// ownerOf returns the address owning key in nd's view.
func (nd *tableNode) ownerOf(table string, key []byte) string {
	f := nd.tables[table]
	_, owners := f.ownership()
	return owners[engine.PartitionFor(key, f.n)]
}

func docPath(f *fakeTable, key []byte) string {
	return "/tables/" + f.spec.Name + "/" + url.PathEscape(f.FormatKey(key))
}

// TestTableRoutedGet: every document is answered by the instance owning
// it, whichever instance is asked, string keys with slashes included.
func TestTableRoutedGet(t *testing.T) {
	cs, sc := customers(40), scores(40)
	nodes := tableCluster(t, testSecret, 2, cs, sc)
	for _, f := range []*fakeTable{cs, sc} {
		for _, d := range f.docs {
			for _, nd := range nodes {
				code, body := socketFetcher(nd.addr)(t, docPath(f, d.Key))
				if code != http.StatusOK {
					t.Fatalf("GET %s on %s = %d %s", docPath(f, d.Key), nd.addr, code, body)
				}
				if got, want := decodeStrictT[docOut](t, body), wantDoc(t, f, d); !reflect.DeepEqual(got, want) {
					t.Fatalf("GET %s on %s = %+v, want %+v", docPath(f, d.Key), nd.addr, got, want)
				}
			}
		}
	}
	a, b := nodes[0], nodes[1]
	// A foreign key with a slash reaches its owner exactly once.
	routed := false
	for _, d := range cs.docs {
		if !strings.Contains(string(d.Key), "/") || a.ownerOf("customers", d.Key) != b.addr {
			continue
		}
		before := b.hits.Load()
		if code, body := socketFetcher(a.addr)(t, docPath(cs, d.Key)); code != http.StatusOK {
			t.Fatalf("%d %s", code, body)
		}
		if n := b.hits.Load() - before; n != 1 {
			t.Errorf("the owner got %d requests, want 1", n)
		}
		routed = true
		break
	}
	if !routed {
		t.Fatal("no key with a slash is owned by the second instance: a weak test")
	}
	// An absent key owned elsewhere is a 404 from the owner.
	for i := 0; ; i++ {
		key := fmt.Sprintf("nobody-%d", i)
		if a.ownerOf("customers", []byte(key)) == b.addr {
			wantJSONErrorBody(t, socketFetcher(a.addr), "/tables/customers/"+key, http.StatusNotFound, "not found in table customers")
			break
		}
	}
}

// wantJSONErrorBody checks status and message of an error over a socket.
func wantJSONErrorBody(t *testing.T, fetch fetcher, target string, status int, part string) {
	t.Helper()
	code, body := fetch(t, target)
	if code != status {
		t.Fatalf("GET %s = %d %s, want %d", target, code, body, status)
	}
	if eb := decodeStrictT[errorBody](t, body); !strings.Contains(eb.Error, part) {
		t.Errorf("GET %s: error %q does not mention %q", target, eb.Error, part)
	}
}

// TestTableForwardedOnce: a signed request for a key this instance does
// not own is a 503, never routed again; an unsigned forwarding header is
// a 401; a signed query is answered with this instance's partitions only.
func TestTableForwardedOnce(t *testing.T) {
	cs := customers(40)
	nodes := tableCluster(t, testSecret, 2, cs)
	a, b := nodes[0], nodes[1]
	var foreign engine.Doc
	for _, d := range cs.docs {
		if a.ownerOf("customers", d.Key) == b.addr {
			foreign = d
			break
		}
	}
	target := "http://" + a.addr + docPath(cs, foreign.Key)
	req := httptest.NewRequest(http.MethodGet, target, nil)
	newPeerAuth([]byte(testSecret)).sign(req, time.Now())
	before := b.hits.Load()
	if code, hdr, body := getJSON(t, target, req.Header); code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Errorf("signed request for a foreign key = %d %s, want 503 with Retry-After", code, body)
	}
	if code, _, body := getJSON(t, target, http.Header{ForwardedHeader: {"1"}}); code != http.StatusUnauthorized {
		t.Errorf("unsigned forwarding header = %d %s, want 401", code, body)
	}
	q := "http://" + a.addr + "/tables/customers?index=total&limit=1000"
	if code, _, body := getJSON(t, q, http.Header{ForwardedHeader: {"1"}}); code != http.StatusUnauthorized {
		t.Errorf("unsigned forwarding header on a query = %d %s, want 401", code, body)
	}
	if n := b.hits.Load() - before; n != 0 {
		t.Errorf("the owner got %d requests, want 0", n)
	}

	req = httptest.NewRequest(http.MethodGet, q, nil)
	newPeerAuth([]byte(testSecret)).sign(req, time.Now())
	code, hdr, body := getJSON(t, q, req.Header)
	if code != http.StatusOK || hdr.Get(PartitionsHeader) != "0,2,4" {
		t.Fatalf("signed query = %d %s %q, want 200 for partitions 0,2,4", code, body, hdr.Get(PartitionsHeader))
	}
	for _, it := range decodeStrictT[pageOut](t, body).Items {
		if it.Partition%2 != 0 {
			t.Errorf("signed query answered %s of partition %d, not owned here", it.Key, it.Partition)
		}
	}
	if n := b.hits.Load() - before; n != 0 {
		t.Errorf("the owner got %d requests, want 0", n)
	}
}

// TestTableRoutedQuery: queries merged across two and three instances
// page through every matching document exactly once, in order, whichever
// instance is asked.
func TestTableRoutedQuery(t *testing.T) {
	cs, sc := customers(50), scores(50)
	num, str := engine.Num, engine.Str
	queries := []struct {
		f      *fakeTable
		params string
		q      engine.IndexQuery
	}{
		{cs, "index=total", engine.IndexQuery{Index: "total"}},
		{cs, "index=total&order=desc&min=50", engine.IndexQuery{Index: "total", Desc: true, Min: num(50), HasMin: true}},
		{cs, "index=tier&order=desc", engine.IndexQuery{Index: "tier", Desc: true}},
		{cs, "index=tier&eq=gold", engine.IndexQuery{Index: "tier", Min: str("gold"), Max: str("gold"), HasMin: true, HasMax: true}},
		{sc, "index=score&order=desc", engine.IndexQuery{Index: "score", Desc: true}},
		{sc, "index=score&max=0", engine.IndexQuery{Index: "score", Max: num(0), HasMax: true}},
	}
	for _, n := range []int{2, 3} {
		nodes := tableCluster(t, testSecret, n, cs, sc)
		for _, tc := range queries {
			t.Run(fmt.Sprintf("%d instances/%s?%s", n, tc.f.spec.Name, tc.params), func(t *testing.T) {
				params, err := url.ParseQuery(tc.params)
				if err != nil {
					t.Fatal(err)
				}
				for i, nd := range nodes {
					limits := []int{5, 1000}
					if i == 0 {
						limits = append(limits, 1)
					}
					checkQuery(t, socketFetcher(nd.addr), tc.f, params, tc.q, limits...)
				}
			})
		}
	}
}

// TestTableQueryPartial: when an owner is down its partitions are
// reported missing and the pages hold every document of the others once.
func TestTableQueryPartial(t *testing.T) {
	cs := customers(60)
	nodes := tableCluster(t, testSecret, 3, cs)
	a := nodes[0]
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	self, owners := a.tables["customers"].ownership()
	moved := map[int32]string{}
	for p, addr := range owners {
		moved[p] = addr
		if addr == nodes[2].addr {
			moved[p] = deadAddr
		}
	}
	a.tables["customers"].setOwners(self, moved)
	before := nodes[2].hits.Load()

	seen := map[string]bool{}
	after := ""
	for pages := 0; ; pages++ {
		code, body := socketFetcher(a.addr)(t, "/tables/customers?index=total&order=desc&limit=7&after="+after)
		if code != http.StatusOK {
			t.Fatalf("page %d: %d %s", pages, code, body)
		}
		page := decodeStrictT[pageOut](t, body)
		if !page.Partial || fmt.Sprint(page.MissingPartitions) != "[2 5]" {
			t.Fatalf("page %d: partial=%v missing=%v, want partial [2 5]", pages, page.Partial, page.MissingPartitions)
		}
		for _, it := range page.Items {
			if seen[it.Key] {
				t.Errorf("%s on two pages", it.Key)
			}
			seen[it.Key] = true
		}
		if page.Next == "" {
			break
		}
		after = url.QueryEscape(page.Next)
	}
	for _, d := range cs.docs {
		if want := d.Partition%3 != 2; seen[string(d.Key)] != want {
			t.Errorf("%s (partition %d): returned=%v, want %v", d.Key, d.Partition, seen[string(d.Key)], want)
		}
	}
	if n := nodes[2].hits.Load() - before; n != 0 {
		t.Errorf("the instance owning nothing got %d requests, want 0", n)
	}
	// A key of a dead owner's partition is a 503.
	for _, d := range cs.docs {
		if d.Partition%3 == 2 {
			wantJSONErrorBody(t, socketFetcher(a.addr), docPath(cs, d.Key), http.StatusServiceUnavailable, "unavailable")
			break
		}
	}
	// Nobody answering at all is a 503.
	allDead := map[int32]string{}
	for p := range moved {
		allDead[p] = deadAddr
	}
	a.tables["customers"].setOwners(self, allDead)
	wantJSONErrorBody(t, socketFetcher(a.addr), "/tables/customers?index=total", http.StatusServiceUnavailable, "unavailable")
}

// peerDoc is a document as a peer would send it, for TestTablePeerAnswersAreValidated.
func peerDoc(key string, partition int, total float64, extra string) string {
	return fmt.Sprintf(`{"table":"customers","key":%q,"partition":%d,"version":1,"value":{"n":1},"index":{"total":%g,"tier":"gold"}%s}`, key, partition, total, extra)
}

// keyIn returns a customer key of partition p of 2.
func keyIn(p int32) string {
	for i := 0; ; i++ {
		if k := fmt.Sprintf("k%d", i); engine.PartitionFor([]byte(k), 2) == p {
			return k
		}
	}
}

// TestTablePeerAnswersAreValidated: a peer's answer is checked, never
// passed through: a bad get answer is a 503, a bad query answer costs the
// peer's partitions.
func TestTablePeerAnswersAreValidated(t *testing.T) {
	k0, k1 := keyIn(0), keyIn(1)
	localTable := func(peer string) *fakeTable {
		f := newFakeTable(customersSpec, false, 2, nil)
		f.setOwners("127.0.0.1:1", map[int32]string{0: "127.0.0.1:1", 1: peer})
		return f
	}
	gets := map[string]string{
		"wrong key":        peerDoc(k0, 1, 9, ""),
		"extra field":      peerDoc(k1, 1, 9, `,"admin":true`),
		"value not object": strings.Replace(peerDoc(k1, 1, 9, ""), `{"n":1}`, `[1]`, 1),
		"index missing":    strings.Replace(peerDoc(k1, 1, 9, ""), `,"tier":"gold"`, ``, 1),
		"index wrong kind": strings.Replace(peerDoc(k1, 1, 9, ""), `"tier":"gold"`, `"tier":5`, 1),
		"index null":       strings.Replace(peerDoc(k1, 1, 9, ""), `"total":9`, `"total":null`, 1),
		"extra index":      strings.Replace(peerDoc(k1, 1, 9, ""), `"tier":"gold"`, `"tier":"gold","x":1`, 1),
		"other table":      strings.Replace(peerDoc(k1, 1, 9, ""), `"customers"`, `"scores"`, 1),
		"not json":         "<html>",
	}
	for name, body := range gets {
		t.Run("get/"+name, func(t *testing.T) {
			peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) }))
			defer peer.Close()
			s := New(Options{Tables: []Table{localTable(strings.TrimPrefix(peer.URL, "http://"))}, PeerSecret: []byte(testSecret)})
			wantJSONError(t, get(t, s.Handler(), "/tables/customers/"+k1), http.StatusServiceUnavailable)
		})
	}
	t.Run("get/valid", func(t *testing.T) {
		peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.EscapedPath() != "/tables/customers/"+k1 || r.Header.Get(ForwardedHeader) == "" {
				http.Error(w, "unexpected request", http.StatusTeapot)
				return
			}
			fmt.Fprint(w, peerDoc(k1, 1, 9, ""))
		}))
		defer peer.Close()
		s := New(Options{Tables: []Table{localTable(strings.TrimPrefix(peer.URL, "http://"))}, PeerSecret: []byte(testSecret)})
		rec := get(t, s.Handler(), "/tables/customers/"+k1)
		if got := strings.TrimSpace(rec.Body.String()); rec.Code != http.StatusOK || got != peerDoc(k1, 1, 9, "") {
			t.Errorf("got %d %s, want the peer's document", rec.Code, got)
		}
	})

	queries := map[string]string{
		"outside the bounds":       `{"table":"customers","index":"total","items":[` + peerDoc(k1, 1, 5, "") + `]}`,
		"partition not covered":    `{"table":"customers","index":"total","items":[` + peerDoc(k0, 0, 9, "") + `]}`,
		"key of another partition": `{"table":"customers","index":"total","items":[` + peerDoc(k0, 1, 9, "") + `]}`,
		"unknown field":            `{"table":"customers","index":"total","items":[],"admin":true}`,
		"partial":                  `{"table":"customers","index":"total","items":[],"partial":true}`,
		"wrong index":              `{"table":"customers","index":"tier","items":[]}`,
		"bad document":             `{"table":"customers","index":"total","items":[` + peerDoc(k1, 1, 9, `,"x":1`) + `]}`,
	}
	for name, body := range queries {
		t.Run("query/"+name, func(t *testing.T) {
			peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(PartitionsHeader, "1")
				fmt.Fprint(w, body)
			}))
			defer peer.Close()
			s := New(Options{Tables: []Table{localTable(strings.TrimPrefix(peer.URL, "http://"))}, PeerSecret: []byte(testSecret)})
			rec := get(t, s.Handler(), "/tables/customers?index=total&min=8")
			page := decode[pageOut](t, rec)
			if rec.Code != http.StatusOK || !page.Partial || fmt.Sprint(page.MissingPartitions) != "[1]" || len(page.Items) != 0 {
				t.Errorf("got %d %+v, want 200, partial, missing [1], no items", rec.Code, page)
			}
		})
	}
	t.Run("query/overlapping peer", func(t *testing.T) {
		// Across a rebalance a peer may still answer for a partition
		// answered here: its copy of that partition is dropped.
		peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(PartitionsHeader, "0,1")
			fmt.Fprint(w, `{"table":"customers","index":"total","items":[`+peerDoc(k0, 0, 9.5, "")+`,`+peerDoc(k1, 1, 9.25, "")+`]}`)
		}))
		defer peer.Close()
		f := newFakeTable(customersSpec, false, 2, []engine.Doc{{Key: []byte(k0), Version: 3, Value: []byte(`{"n":0}`),
			Index: []engine.IndexValue{engine.Num(9), engine.Str("gold")}}})
		f.setOwners("127.0.0.1:1", map[int32]string{0: "127.0.0.1:1", 1: strings.TrimPrefix(peer.URL, "http://")})
		s := New(Options{Tables: []Table{f}, PeerSecret: []byte(testSecret)})
		rec := get(t, s.Handler(), "/tables/customers?index=total&min=8")
		page := decode[pageOut](t, rec)
		if rec.Code != http.StatusOK || page.Partial || len(page.Items) != 2 ||
			page.Items[0].Key != k0 || page.Items[0].Version != 3 || page.Items[1].Key != k1 {
			t.Errorf("got %d %+v, want %s from here then %s from the peer", rec.Code, page, k0, k1)
		}
	})
	t.Run("query/bad partitions header", func(t *testing.T) {
		peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(PartitionsHeader, "1,7")
			fmt.Fprint(w, `{"table":"customers","index":"total","items":[]}`)
		}))
		defer peer.Close()
		s := New(Options{Tables: []Table{localTable(strings.TrimPrefix(peer.URL, "http://"))}, PeerSecret: []byte(testSecret)})
		if page := decode[pageOut](t, get(t, s.Handler(), "/tables/customers?index=total")); !page.Partial {
			t.Errorf("a bad %s header was accepted: %+v", PartitionsHeader, page)
		}
	})
}

// TestTableMaliciousOwner: an owner advertising something other than a
// bare host:port is never contacted.
func TestTableMaliciousOwner(t *testing.T) {
	var internal atomic.Int64
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { internal.Add(1) }))
	defer admin.Close()
	host := strings.TrimPrefix(admin.URL, "http://")
	for _, evil := range []string{host + "/internal?x=", "user@" + host, "http://" + host} {
		f := newFakeTable(customersSpec, false, 1, nil)
		f.setOwners("127.0.0.1:1", map[int32]string{0: evil})
		h := New(Options{Tables: []Table{f}, PeerSecret: []byte(testSecret)}).Handler()
		wantJSONError(t, get(t, h, "/tables/customers/c1"), http.StatusServiceUnavailable)
		wantJSONError(t, get(t, h, "/tables/customers?index=total"), http.StatusServiceUnavailable)
	}
	if n := internal.Load(); n != 0 {
		t.Fatalf("the internal service got %d requests", n)
	}
}

// TestSharedTable: a table every instance shares is answered locally
// without asking for owners, and without a partitions header.
func TestSharedTable(t *testing.T) {
	cs := customers(20)
	cs.shared = true
	cs.setOwners("", nil) // Owner and Membership would fail
	h := New(Options{Tables: []Table{cs}}).Handler()
	for _, d := range cs.docs {
		if rec := get(t, h, docPath(cs, d.Key)); rec.Code != http.StatusOK {
			t.Fatalf("GET %s = %d %s", docPath(cs, d.Key), rec.Code, rec.Body.String())
		}
	}
	checkQuery(t, handlerFetcher(h), cs, url.Values{"index": {"total"}, "order": {"desc"}}, engine.IndexQuery{Index: "total", Desc: true})
	if rec := get(t, h, "/tables/customers?index=total"); rec.Header().Get(PartitionsHeader) != "" {
		t.Errorf("a shared table's answer carries %s", PartitionsHeader)
	}
}
