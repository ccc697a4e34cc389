package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
)

// TestUnitTableView checks the engine's query view of a job's table on a
// local store (answers only running partitions) and a shared one.
func TestUnitTableView(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
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
			r := newJobRig(t, newCluster(t), engine.ExactlyOnce, tc.store)
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
