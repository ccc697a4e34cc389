package web

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

func TestHealthAndReadiness(t *testing.T) {
	var notReady atomic.Pointer[error]
	ready := func() error {
		if p := notReady.Load(); p != nil {
			return *p
		}
		return nil
	}
	h := New(Options{Tables: []Table{newFake()}, Ready: ready}).Handler()

	check := func(t *testing.T, target string, status int, want healthBody) {
		t.Helper()
		rec := get(t, h, target)
		if rec.Code != status {
			t.Fatalf("%s: status = %d, want %d (body %q)", target, rec.Code, status, rec.Body.String())
		}
		if got := decode[healthBody](t, rec); got != want {
			t.Errorf("%s: body = %+v, want %+v", target, got, want)
		}
	}
	t.Run("ready", func(t *testing.T) {
		check(t, "/healthz", 200, healthBody{Status: "ok"})
		check(t, "/readyz", 200, healthBody{Status: "ready"})
	})
	t.Run("not ready", func(t *testing.T) {
		err := errors.New("2 of 3 partitions restoring")
		notReady.Store(&err)
		defer notReady.Store(nil)
		check(t, "/healthz", 200, healthBody{Status: "ok"})
		check(t, "/readyz", 503, healthBody{Status: "not ready", Reason: "2 of 3 partitions restoring"})
	})
	t.Run("nil Ready means ready", func(t *testing.T) {
		rec := get(t, New(Options{}).Handler(), "/readyz")
		if rec.Code != http.StatusOK {
			t.Errorf("status = %d, want 200", rec.Code)
		}
	})
}

func TestAPIStats(t *testing.T) {
	st := engine.Stats{
		RecordsProcessed: 1, RecordsRekeyed: 2, DuplicatesSkipped: 3, DeadLettered: 4, ChangelogRestored: 5,
		StoreBatches: 6, StoreDocsWritten: 7, FencedWrites: 8, PartitionsAssigned: 9, PartitionsRunning: 10,
	}
	tests := []struct {
		name  string
		ready error
		want  statsBody
	}{
		{"ready", nil, statsBody{Ready: true, Stats: st}},
		{"not ready", errors.New("restoring"), statsBody{Ready: false, Reason: "restoring", Stats: st}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := New(Options{Stats: func() engine.Stats { return st }, Ready: func() error { return tc.ready }}).Handler()
			rec := get(t, h, "/api/stats")
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200", rec.Code)
			}
			got := decode[statsBody](t, rec)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if got.Stats.RecordsProcessed != 1 || got.Stats.PartitionsRunning != 10 || got.Stats.FencedWrites != 8 {
				t.Errorf("fields are mapped wrongly: %+v", got.Stats)
			}
		})
	}
}

func TestUnknownRoutes(t *testing.T) {
	h := New(Options{Tables: []Table{newFake()}}).Handler()
	tests := []struct {
		method, target string
		status         int
	}{
		{"GET", "/nope", 404},
		{"GET", "/movies/1/extra", 404},
		{"GET", "/dashboard/missing.js", 404},
		{"GET", "/swagger-ui/missing.js", 404},
		{"POST", "/movies", 405},
		{"DELETE", "/movies/1", 405},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			wantJSONError(t, do(t, h, tc.method, tc.target), tc.status)
		})
	}
}

// TestPartitionRoles: /api/stats lists the partitions held here with
// their role, lag and replay progress, and /metrics exports each one's lag
// and replayed records.
func TestPartitionRoles(t *testing.T) {
	roles := map[string][]engine.PartitionRole{"movies": {
		{Partition: 0, Role: engine.RoleActive, State: "RUNNING", LagMs: 0, Replayed: 40},
		{Partition: 1, Role: engine.RoleStandby, LagRecords: 5, LagMs: 120, Replayed: 9000, ReplayPerSec: 250.5},
	}}
	h := New(Options{Roles: func() map[string][]engine.PartitionRole { return roles }}).Handler()
	rec := get(t, h, "/api/stats")
	if got := decode[statsBody](t, rec).Partitions; !reflect.DeepEqual(got, roles) {
		t.Errorf("/api/stats partitions = %+v, want %+v", got, roles)
	}
	body := get(t, h, "/metrics").Body.String()
	for _, want := range []string{
		`keepstate_partition_lag_records{partition="1",role="standby",table="movies"} 5`,
		`keepstate_partition_lag_records{partition="0",role="active",table="movies"} 0`,
		`keepstate_partition_replayed_records_total{partition="1",role="standby",table="movies"} 9000`,
		`keepstate_partition_replayed_records_total{partition="0",role="active",table="movies"} 40`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
