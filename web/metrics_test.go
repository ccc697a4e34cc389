package web

import (
	"errors"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// series parses a Prometheus text exposition into "name{k=v,...}" (labels
// sorted) -> value, and name -> TYPE.
func series(t *testing.T, text string) (values map[string]float64, types map[string]string) {
	t.Helper()
	values, types = map[string]float64{}, map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q: %v", line, err)
		}
		values[seriesKey(line[:sp])] = v
	}
	return values, types
}

// seriesKey normalises `name{b="2",a="1"}` to `name{a=1,b=2}`.
func seriesKey(s string) string {
	name, labels, ok := strings.Cut(s, "{")
	if !ok {
		return s
	}
	var pairs []string
	for _, p := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
		if p != "" {
			pairs = append(pairs, strings.ReplaceAll(p, `"`, ""))
		}
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

func TestMetrics(t *testing.T) {
	var processed atomic.Int64
	processed.Store(1001)
	var ready atomic.Bool
	stats := func() engine.Stats {
		return engine.Stats{
			RecordsProcessed: processed.Load(), RecordsRekeyed: 1002, DuplicatesSkipped: 1003, DeadLettered: 1004,
			ChangelogRestored: 1005, StoreBatches: 1006, StoreDocsWritten: 1007, FencedWrites: 1008,
			PartitionsAssigned: 6, PartitionsRunning: 5, ChangelogSkipped: 1009,
		}
	}
	readyFn := func() error {
		if ready.Load() {
			return nil
		}
		return errors.New("restoring")
	}
	h := New(Options{Tables: []Table{newFake(mv(1, 2, 17))}, Stats: stats, Ready: readyFn}).Handler()

	for _, target := range []string{"/movies/1", "/movies/1", "/movies/999", "/movies?limit=0", "/movies?minAvg=8", "/nope", "/wp-admin/x.php"} {
		get(t, h, target)
	}
	do(t, h, "BREW", "/movies")

	scrape := func() (map[string]float64, map[string]string) {
		t.Helper()
		rec := get(t, h, "/metrics")
		if rec.Code != http.StatusOK {
			t.Fatalf("/metrics status = %d", rec.Code)
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("Content-Type = %q, want text/plain", ct)
		}
		return series(t, rec.Body.String())
	}
	values, types := scrape()

	want := []struct {
		key, typ string
		value    float64
	}{
		{"keepstate_records_processed_total", "counter", 1001},
		{"keepstate_records_rekeyed_total", "counter", 1002},
		{"keepstate_duplicates_skipped_total", "counter", 1003},
		{"keepstate_dead_lettered_total", "counter", 1004},
		{"keepstate_changelog_restored_total", "counter", 1005},
		{"keepstate_changelog_skipped_total", "counter", 1009},
		{"keepstate_store_batches_total", "counter", 1006},
		{"keepstate_store_docs_written_total", "counter", 1007},
		{"keepstate_fenced_writes_total", "counter", 1008},
		{"keepstate_partitions_assigned", "gauge", 6},
		{"keepstate_partitions_running", "gauge", 5},
		{"keepstate_ready", "gauge", 0},
		{`keepstate_http_requests_total{code=200,method=GET,route=/movies/{id}}`, "counter", 2},
		{`keepstate_http_requests_total{code=404,method=GET,route=/movies/{id}}`, "counter", 1},
		{`keepstate_http_requests_total{code=400,method=GET,route=/movies}`, "counter", 1},
		{`keepstate_http_requests_total{code=200,method=GET,route=/movies}`, "counter", 1},
		{`keepstate_http_requests_total{code=404,method=GET,route=unmatched}`, "counter", 2},
		{`keepstate_http_requests_total{code=405,method=other,route=/movies}`, "counter", 1},
		{`keepstate_http_request_duration_seconds_count{method=GET,route=/movies/{id}}`, "histogram", 3},
	}
	for _, w := range want {
		t.Run(w.key, func(t *testing.T) {
			got, ok := values[w.key]
			if !ok {
				t.Fatalf("series %s missing", w.key)
			}
			if got != w.value {
				t.Errorf("%s = %v, want %v", w.key, got, w.value)
			}
			name, _, _ := strings.Cut(w.key, "{")
			name = strings.TrimSuffix(name, "_count")
			if types[name] != w.typ {
				t.Errorf("TYPE of %s = %q, want %q", name, types[name], w.typ)
			}
		})
	}
	if _, ok := values["go_goroutines"]; !ok {
		t.Errorf("Go runtime metrics missing")
	}
	for k := range values {
		if strings.Contains(k, "wp-admin") || strings.Contains(k, "/nope") {
			t.Errorf("unmatched path leaked into a label: %s", k)
		}
	}

	// Stats and readiness are read at scrape time, not at New.
	processed.Store(2002)
	ready.Store(true)
	values, _ = scrape()
	if got := values["keepstate_records_processed_total"]; got != 2002 {
		t.Errorf("after update: keepstate_records_processed_total = %v, want 2002", got)
	}
	if got := values["keepstate_ready"]; got != 1 {
		t.Errorf("after update: keepstate_ready = %v, want 1", got)
	}
	if got := values[`keepstate_http_requests_total{code=200,method=GET,route=/metrics}`]; got != 1 {
		t.Errorf("scrapes counted = %v, want 1 (the first one)", got)
	}
}

// TestMetricsRegistriesAreSeparate checks that two servers in one process
// (as in tests or the demo) do not share or collide on registries.
func TestMetricsRegistriesAreSeparate(t *testing.T) {
	a := New(Options{Tables: []Table{newFake()}}).Handler()
	b := New(Options{Tables: []Table{newFake()}}).Handler()
	get(t, a, "/healthz")
	get(t, a, "/healthz")
	values, _ := series(t, get(t, b, "/metrics").Body.String())
	if v, ok := values[`keepstate_http_requests_total{code=200,method=GET,route=/healthz}`]; ok {
		t.Errorf("server b counts server a's requests: %v", v)
	}
}

// TestEveryStatIsExported keeps /metrics in step with engine.Stats, the one
// definition of the counters: each field must be read by exactly one
// metric, so a counter added to Stats cannot be forgotten here.
func TestEveryStatIsExported(t *testing.T) {
	var s engine.Stats
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		v.Field(i).SetInt(int64(i + 1)) // a distinct value per field
	}
	read := map[int64]string{}
	for _, m := range statMetrics {
		got := m.get(s)
		if other, dup := read[got]; dup {
			t.Errorf("metrics %s and %s read the same Stats field", other, m.name)
		}
		read[got] = m.name
	}
	for i := range v.NumField() {
		if _, ok := read[int64(i+1)]; !ok {
			t.Errorf("engine.Stats.%s has no metric in statMetrics", v.Type().Field(i).Name)
		}
	}
}
