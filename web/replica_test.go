package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// replicaTable is a fakeTable that also keeps standby copies of the
// partitions in has.
type replicaTable struct {
	*fakeTable
	has   map[int32]bool
	stale engine.Staleness
}

var _ ReplicaReader = (*replicaTable)(nil)

func (r *replicaTable) GetReplica(_ context.Context, key []byte) (engine.Doc, engine.Staleness, error) {
	d, ok := r.find(key)
	p := d.Partition
	if !ok {
		p = engine.PartitionFor(key, r.n)
	}
	if !r.has[p] {
		return engine.Doc{}, engine.Staleness{}, fmt.Errorf("no standby: %w", engine.ErrUnavailable)
	}
	if !ok {
		return engine.Doc{}, r.stale, engine.ErrNotFound
	}
	return d, r.stale, nil
}

// TestReplicaAnswers: when a key's active cannot answer, a standby copy
// on the instance answers, marked stale in the JSON and the headers; with
// activeOnly=true, or without a copy, the answer is 503; the active's own
// answers carry no mark.
func TestReplicaAnswers(t *testing.T) {
	f := customers(40)
	f.shared = false
	const self = "127.0.0.1:1"
	f.setOwners(self, map[int32]string{0: self}) // partitions 1..n-1 have no owner now
	rt := &replicaTable{fakeTable: f, has: map[int32]bool{1: true}, stale: engine.Staleness{Records: 7, Age: 1500 * time.Millisecond}}
	h := New(Options{Tables: []Table{rt}}).Handler()
	var onActive, onReplica, onNeither engine.Doc
	for _, d := range f.docs {
		switch d.Partition {
		case 0:
			onActive = d
		case 1:
			onReplica = d
		default:
			onNeither = d
		}
	}
	if onActive.Key == nil || onReplica.Key == nil || onNeither.Key == nil {
		t.Fatal("customers(40) lacks a key of partitions 0, 1 or 2")
	}
	target := func(d engine.Doc) string { return "/tables/customers/" + url.PathEscape(f.FormatKey(d.Key)) }
	type staleOut struct {
		Records int64 `json:"records"`
		Ms      int64 `json:"ms"`
	}
	type docStale struct {
		docOut
		Stale *staleOut `json:"stale"`
	}

	rec := get(t, h, target(onReplica))
	if rec.Code != http.StatusOK {
		t.Fatalf("replica key: %d %s, want 200 from the standby", rec.Code, rec.Body.String())
	}
	got := decode[docStale](t, rec)
	if !reflect.DeepEqual(got.docOut, wantDoc(t, f, onReplica)) {
		t.Errorf("replica answer %+v, want %+v", got.docOut, wantDoc(t, f, onReplica))
	}
	if got.Stale == nil || *got.Stale != (staleOut{Records: 7, Ms: 1500}) {
		t.Errorf("stale = %+v, want records 7 ms 1500", got.Stale)
	}
	for h, want := range map[string]string{ReplicaHeader: "standby", LagRecordsHeader: "7", LagMillisHeader: "1500"} {
		if v := rec.Header().Get(h); v != want {
			t.Errorf("header %s = %q, want %q", h, v, want)
		}
	}

	if rec := get(t, h, target(onReplica)+"?activeOnly=true"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("activeOnly=true: %d %s, want 503", rec.Code, rec.Body.String())
	}
	if rec := get(t, h, target(onNeither)); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("no active, no standby: %d %s, want 503", rec.Code, rec.Body.String())
	}
	// A key the standby does not hold may have been created in records it
	// has still to read: unavailable, never a 404 that passes for current.
	missing := ""
	for i := 1000; missing == ""; i++ {
		if k := fmt.Sprintf("c%d", i); engine.PartitionFor([]byte(k), f.n) == onReplica.Partition {
			missing = k
		}
	}
	if rec := get(t, h, "/tables/customers/"+missing); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("key missing from the standby: %d %s, want 503", rec.Code, rec.Body.String())
	}
	rec = get(t, h, target(onActive))
	if rec.Code != http.StatusOK || rec.Header().Get(ReplicaHeader) != "" {
		t.Fatalf("active key: %d (replica header %q), want 200 unmarked", rec.Code, rec.Header().Get(ReplicaHeader))
	}
	if got := decode[docStale](t, rec); got.Stale != nil {
		t.Errorf("active answer marked stale: %+v", got.Stale)
	}
}

// TestUnconfirmedCopyAnswers: an active's own copy answering while its
// group membership is unconfirmed is marked as such (JSON and header);
// a key missing from it is 503, not 404, since the copy may be behind by
// more than the acceptable lag.
func TestUnconfirmedCopyAnswers(t *testing.T) {
	f := customers(40)
	f.shared = false
	const self = "127.0.0.1:1"
	f.setOwners(self, map[int32]string{}) // nobody is known to own anything now
	rt := &replicaTable{fakeTable: f, has: map[int32]bool{1: true}, stale: engine.Staleness{Age: 4200 * time.Millisecond, Unconfirmed: true}}
	h := New(Options{Tables: []Table{rt}}).Handler()
	var onCopy engine.Doc
	for _, d := range f.docs {
		if d.Partition == 1 {
			onCopy = d
			break
		}
	}
	rec := get(t, h, "/tables/customers/"+url.PathEscape(f.FormatKey(onCopy.Key)))
	if rec.Code != http.StatusOK {
		t.Fatalf("key of the unconfirmed copy: %d %s, want 200", rec.Code, rec.Body.String())
	}
	type staleOut struct {
		Records     int64 `json:"records"`
		Ms          int64 `json:"ms"`
		Unconfirmed bool  `json:"unconfirmed"`
	}
	got := decode[struct {
		docOut
		Stale *staleOut `json:"stale"`
	}](t, rec)
	if got.Stale == nil || *got.Stale != (staleOut{Ms: 4200, Unconfirmed: true}) {
		t.Errorf("stale = %+v, want ms 4200, unconfirmed", got.Stale)
	}
	for h, want := range map[string]string{ReplicaHeader: "unconfirmed", LagRecordsHeader: "0", LagMillisHeader: "4200"} {
		if v := rec.Header().Get(h); v != want {
			t.Errorf("header %s = %q, want %q", h, v, want)
		}
	}

	// A key of partition 1 that the copy does not hold.
	for i := 0; ; i++ {
		shown := "missing" + strconv.Itoa(i)
		key, err := f.ParseKey(shown)
		if err != nil {
			t.Fatal(err)
		}
		if engine.PartitionFor(key, f.n) != 1 {
			continue
		}
		if rec := get(t, h, "/tables/customers/"+shown); rec.Code != http.StatusServiceUnavailable {
			t.Errorf("key missing from the unconfirmed copy: %d %s, want 503", rec.Code, rec.Body.String())
		}
		break
	}
}
