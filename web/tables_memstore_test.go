package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
)

// memTable serves a real engine.Table (engine/memstore) through the web
// layer: the key codec, values and ownership come from a fakeTable, the
// documents and queries from the store. owned nil means shared.
type memTable struct {
	*fakeTable
	tb    engine.Table
	owned map[int32]bool
}

func (m memTable) Shared() bool { return m.owned == nil }

func (m memTable) Get(ctx context.Context, key []byte) (engine.Doc, error) {
	if m.owned != nil && !m.owned[engine.PartitionFor(key, m.n)] {
		return engine.Doc{}, fmt.Errorf("partition not here: %w", engine.ErrUnavailable)
	}
	return m.tb.Get(ctx, key)
}

func (m memTable) QueryLocal(ctx context.Context, q engine.IndexQuery) (engine.DocPage, []int32, error) {
	page, err := m.tb.Query(ctx, q)
	var covered []int32
	for p := int32(0); p < m.n; p++ {
		if m.owned == nil || m.owned[p] {
			covered = append(covered, p)
		}
	}
	return page, covered, err
}

// newMemTable writes the documents of f's partitions that keep says to a
// new memstore table through Claim and Apply.
func newMemTable(t *testing.T, f *fakeTable, keep func(p int32) bool) engine.Table {
	t.Helper()
	ctx := context.Background()
	tb, err := memstore.New().OpenTable(ctx, f.spec)
	if err != nil {
		t.Fatal(err)
	}
	byPart := map[int32][]engine.Doc{}
	for _, d := range f.docs {
		if keep(d.Partition) {
			byPart[d.Partition] = append(byPart[d.Partition], d.Clone())
		}
	}
	for p, docs := range byPart {
		epoch, err := tb.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.Apply(ctx, engine.DocBatch{Partition: p, Epoch: epoch, Docs: docs, Checkpoint: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return tb
}

var memQueries = []struct {
	params string
	q      engine.IndexQuery
}{
	{"index=total", engine.IndexQuery{Index: "total"}},
	{"index=total&order=desc&max=150", engine.IndexQuery{Index: "total", Desc: true, Max: engine.Num(150), HasMax: true}},
	{"index=tier&order=desc", engine.IndexQuery{Index: "tier", Desc: true}},
	{"index=tier&eq=gold", engine.IndexQuery{Index: "tier", Min: engine.Str("gold"), Max: engine.Str("gold"), HasMin: true, HasMax: true}},
}

// TestMemstoreTable runs the table routes over engine/memstore: one
// shared instance, then two instances each storing only the partitions
// it owns.
func TestMemstoreTable(t *testing.T) {
	cs := customers(45)
	shared := memTable{fakeTable: cs, tb: newMemTable(t, cs, func(int32) bool { return true })}
	h := New(Options{Tables: []Table{shared}}).Handler()
	for _, d := range cs.docs {
		rec := get(t, h, docPath(cs, d.Key))
		if got, want := decode[docOut](t, rec), wantDoc(t, cs, d); rec.Code != http.StatusOK || !reflect.DeepEqual(got, want) {
			t.Fatalf("GET %s = %d %+v, want %+v", docPath(cs, d.Key), rec.Code, got, want)
		}
	}
	for _, mq := range memQueries {
		params, _ := url.ParseQuery(mq.params)
		checkQuery(t, handlerFetcher(h), cs, params, mq.q)
	}

	nodes := tableClusterOf(t, testSecret, 2, func(nd *tableNode, owners map[int32]string) []Table {
		f := cs.clone()
		f.setOwners(nd.addr, owners)
		owned := map[int32]bool{}
		for p, addr := range owners {
			owned[p] = addr == nd.addr
		}
		return []Table{memTable{fakeTable: f, tb: newMemTable(t, cs, func(p int32) bool { return owned[p] }), owned: owned}}
	})
	for _, nd := range nodes {
		for _, d := range cs.docs {
			code, body := socketFetcher(nd.addr)(t, docPath(cs, d.Key))
			if code != http.StatusOK || !reflect.DeepEqual(decodeStrictT[docOut](t, body), wantDoc(t, cs, d)) {
				t.Fatalf("GET %s on %s = %d %s", docPath(cs, d.Key), nd.addr, code, body)
			}
		}
		for _, mq := range memQueries {
			params, _ := url.ParseQuery(mq.params)
			checkQuery(t, socketFetcher(nd.addr), cs, params, mq.q, 4, 1000)
		}
	}
}
