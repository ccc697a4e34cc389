package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/kafkatest"
	"github.com/keepstate/keepstate/engine/memstore"
)

// TestUnitTableView checks the engine's query view of a job's table on a
// local store (answers only running partitions) and a shared one.
func TestUnitTableView(t *testing.T) {
	for _, tc := range []struct {
		name   string
		store  *memstore.Store
		shared bool
	}{
		{"local", memstore.New(memstore.Local()), false},
		{"shared", memstore.New(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newJobRig(t, kafkatest.New(), engine.ExactlyOnce, tc.store)
			v := r.e.View()
			if got := v.Shared(); got != tc.shared {
				t.Errorf("Shared: got %v, want %v", got, tc.shared)
			}
			r.send(t, `{"customer":"ann","amount":600}`, `{"customer":"bob","amount":500}`, `{"customer":"ann","amount":500}`)
			eventually(t, "both customers stored", hasSpend(r.table, map[string]spend{
				"ann": {Count: 2, Total: 1100, Max: 600}, "bob": {Count: 1, Total: 500, Max: 500}}))
			eventually(t, "engine ready", r.e.Ready)

			if got := v.Spec().Name; got != "customers" {
				t.Errorf("Spec().Name: got %q, want customers", got)
			}
			if got := v.KeyKind(); got != "string" {
				t.Errorf("KeyKind: got %q, want string", got)
			}
			key, err := v.ParseKey("ann")
			if err != nil || v.FormatKey(key) != "ann" {
				t.Fatalf("ParseKey/FormatKey: got %q %v, want ann", key, err)
			}
			if _, err := v.ParseKey(string([]byte{0xff})); !errors.Is(err, engine.ErrInvalid) {
				t.Errorf("ParseKey(invalid UTF-8): got %v, want ErrInvalid", err)
			}
			addr, local, err := v.Owner(ctx, key)
			if err != nil || !local || addr != r.cfg.AdvertiseAddr {
				t.Errorf("Owner: got %q local=%v %v, want this instance", addr, local, err)
			}
			d, err := v.Get(ctx, key)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			js, err := v.ValueJSON(d)
			if err != nil || string(js) != `{"count":2,"total":1100,"max":600}` {
				t.Errorf("ValueJSON: got %s %v", js, err)
			}
			if _, err := v.Get(ctx, []byte("nobody")); !errors.Is(err, engine.ErrNotFound) {
				t.Errorf("Get(nobody): got %v, want ErrNotFound", err)
			}
			page, covered, err := v.QueryLocal(ctx, engine.IndexQuery{Index: "total", Min: engine.Num(1000), HasMin: true, Limit: 1})
			if err != nil || len(page.Docs) != 1 || string(page.Docs[0].Key) != "ann" || len(covered) != 1 || page.Next == nil {
				t.Errorf("QueryLocal(total >= 1000, limit 1): got %d docs, covered %v, next %v, %v; want ann, [0], a cursor", len(page.Docs), covered, page.Next, err)
			}
			if _, _, err := v.QueryLocal(ctx, engine.IndexQuery{Index: "nope", Limit: 1}); !errors.Is(err, engine.ErrInvalid) {
				t.Errorf("QueryLocal(unknown index): got %v, want ErrInvalid", err)
			}
			m, err := v.Membership(ctx)
			if err != nil || m.Owners[0] != r.cfg.AdvertiseAddr {
				t.Errorf("Membership: got %+v %v, want partition 0 here", m, err)
			}
		})
	}
}

// TestUnitMovieTable checks the movie Store served as a Table.
func TestUnitMovieTable(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(memstore.Local())
	seed(t, s, 0, 5,
		engine.MovieStats{MovieID: 1, Partition: 0, Count: 2, Sum: 18, Version: 1},
		engine.MovieStats{MovieID: 2, Partition: 0, Count: 1, Sum: 9, Version: 2, Sources: map[int32]int64{0: 7}},
		engine.MovieStats{MovieID: 3, Partition: 0, Count: 1, Sum: 4, Version: 3})
	tb := engine.MovieTable(s)
	if got := tb.Spec(); got.Name != "movies" || !got.TiesAscending {
		t.Errorf("Spec: got %+v, want movies with ties ascending", got)
	}
	if l, ok := tb.(engine.InstanceLocal); !ok || !l.InstanceLocal() {
		t.Errorf("InstanceLocal: want true for a local movie store")
	}
	d, err := tb.Get(ctx, engine.EncodeMovieKey(2))
	if err != nil || d.Index[0].Num != 9 || d.Sources[0] != 7 || d.Version != 2 {
		t.Fatalf("Get(2): got %+v %v", d, err)
	}
	loaded, err := tb.Load(ctx, [][]byte{engine.EncodeMovieKey(1), engine.EncodeMovieKey(4)})
	if err != nil || len(loaded) != 1 {
		t.Fatalf("Load(1, 4): got %d docs %v, want 1", len(loaded), err)
	}
	// Movies 1 and 2 tie at 9: descending average, ties by id ascending.
	page, err := tb.Query(ctx, engine.IndexQuery{Index: "avg", Desc: true, Limit: 2})
	if err != nil || len(page.Docs) != 2 || page.Next == nil {
		t.Fatalf("Query(desc, 2): got %d docs next %v %v", len(page.Docs), page.Next, err)
	}
	for i, want := range []int64{1, 2} {
		if id, _ := engine.DecodeMovieKey(page.Docs[i].Key); id != want {
			t.Errorf("Query(desc) doc %d: got movie %d, want %d", i, id, want)
		}
	}
	rest, err := tb.Query(ctx, engine.IndexQuery{Index: "avg", Desc: true, Limit: 2, After: page.Next, Min: engine.Num(4), HasMin: true, Max: engine.Num(10), HasMax: true})
	if err != nil || len(rest.Docs) != 1 {
		t.Errorf("Query(desc, after): got %d docs %v, want movie 3", len(rest.Docs), err)
	}
	if _, err := tb.Query(ctx, engine.IndexQuery{Index: "avg", Limit: 2}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("Query(asc): got %v, want ErrInvalid", err)
	}
	// Apply round-trips a table document into the movie layout.
	epoch, err := tb.Claim(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	d.Version = 10
	if err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: []engine.Doc{d}, Checkpoint: 6}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if cp, ok, err := tb.Checkpoint(ctx, 0); err != nil || !ok || cp != 6 {
		t.Errorf("Checkpoint: got %d %v %v, want 6", cp, ok, err)
	}
	bad := d
	bad.Value = []byte{1, 2, 3}
	bad.Version = 11
	if err := tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: epoch, Docs: []engine.Doc{bad}}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("Apply(3-byte value): got %v, want ErrInvalid", err)
	}
	var scanned int
	if err := tb.(engine.TableScanner).ScanPartition(ctx, 0, func(engine.Doc) error { scanned++; return nil }); err != nil || scanned != 3 {
		t.Errorf("ScanPartition: got %d docs %v, want 3", scanned, err)
	}
	if err := tb.DropPartition(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Get(ctx, engine.EncodeMovieKey(2)); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get after DropPartition: got %v, want ErrNotFound", err)
	}
}
