package web

import (
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/keepstate/keepstate/engine"
)

// unmatchedRoute labels requests that matched no route: scanners cannot grow the labels.
const unmatchedRoute = "unmatched"

// statMetric maps one engine.Stats field to a Prometheus metric.
type statMetric struct {
	name, help string
	kind       prometheus.ValueType
	get        func(engine.Stats) int64
}

var statMetrics = []statMetric{
	{"keepstate_records_processed_total", "Ratings applied to an aggregate.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.RecordsProcessed }},
	{"keepstate_records_rekeyed_total", "Input records forwarded to the repartition topic.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.RecordsRekeyed }},
	{"keepstate_duplicates_skipped_total", "Repartition records skipped as replays or rekey duplicates.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.DuplicatesSkipped }},
	{"keepstate_dead_lettered_total", "Records sent to the dead-letter topic.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.DeadLettered }},
	{"keepstate_changelog_restored_total", "Changelog records read during restores.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.ChangelogRestored }},
	{"keepstate_changelog_skipped_total", "Changelog records a restore could not read and skipped.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.ChangelogSkipped }},
	{"keepstate_store_batches_total", "Atomic batch writes to the store.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.StoreBatches }},
	{"keepstate_store_docs_written_total", "Documents written in store batches.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.StoreDocsWritten }},
	{"keepstate_fenced_writes_total", "Batches refused because another writer owns the partition.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.FencedWrites }},
	{"keepstate_transactions_committed_total", "Flush transactions committed (exactly-once).", prometheus.CounterValue, func(s engine.Stats) int64 { return s.TransactionsCommitted }},
	{"keepstate_transactions_aborted_total", "Flush transactions aborted (fenced or failed); invisible to read_committed readers.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.TransactionsAborted }},
	{"keepstate_group_restarts_total", "Consumer group sessions ended by an error.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.GroupRestarts }},
	{"keepstate_read_lease_lapses_total", "Times the read lease ran out or was revoked: the instance answered none of its partitions as owner until a heartbeat was answered again.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.ReadLeaseLapses }},
	{"keepstate_partitions_assigned", "Repartition partitions this instance owns.", prometheus.GaugeValue, func(s engine.Stats) int64 { return s.PartitionsAssigned }},
	{"keepstate_partitions_running", "Owned partitions that finished restoring.", prometheus.GaugeValue, func(s engine.Stats) int64 { return s.PartitionsRunning }},
	{"keepstate_partitions_standby", "Partitions this instance keeps as standby replicas, warm-ups included.", prometheus.GaugeValue, func(s engine.Stats) int64 { return s.PartitionsStandby }},
	{"keepstate_standby_records_total", "Changelog records standby replicas read into the store.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.StandbyRecords }},
	{"keepstate_group_rejoins_total", "Times a caught-up warm-up made this instance rejoin the group so that its active could move here.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.GroupRejoins }},
	{"keepstate_partitions_resumed_total", "Partitions that stayed on this instance across a rebalance and ran on without a restore.", prometheus.CounterValue, func(s engine.Stats) int64 { return s.PartitionsResumed }},
}

// Descriptions of the metrics of readiness and of the partitions held here.
var (
	readyDesc = prometheus.NewDesc("keepstate_ready", "1 when every assigned partition is running (as /readyz), else 0.", nil, nil)
	lagDesc   = prometheus.NewDesc("keepstate_partition_lag_records",
		"Each partition held here, by role (active, standby, warmup): for a standby, the changelog offsets it was behind at its last read; 0 for an active.",
		[]string{"table", "partition", "role"}, nil)
	replayedDesc = prometheus.NewDesc("keepstate_partition_replayed_records_total",
		"Changelog records replayed into this instance's copy of each partition held here (restores, standby and warm-up catch-ups); its rate is the restore rate.",
		[]string{"table", "partition", "role"}, nil)
)

// metrics is the server's own Prometheus registry (never the global one):
// engine stats, HTTP, Go runtime and process metrics. It is itself the
// collector of the engine stats, readiness and roles, read at scrape time.
type metrics struct {
	opts     Options            // Ready and Stats set
	descs    []*prometheus.Desc // of statMetrics
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	routes   map[string]string // echo path -> route label
}

func newMetrics(opts Options) *metrics {
	m := &metrics{
		opts: opts, reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "keepstate_http_requests_total",
			Help: "HTTP requests answered, by route, method and status code."}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "keepstate_http_request_duration_seconds",
			Help:    "HTTP request latency, by route and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
		routes: map[string]string{},
	}
	for _, sm := range statMetrics {
		m.descs = append(m.descs, prometheus.NewDesc(sm.name, sm.help, nil, nil))
	}
	m.reg.MustRegister(m, m.requests, m.duration, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
	ch <- readyDesc
	ch <- lagDesc
	ch <- replayedDesc
}

// Collect implements prometheus.Collector; it takes one Stats snapshot.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	st := m.opts.Stats()
	for i, sm := range statMetrics {
		ch <- prometheus.MustNewConstMetric(m.descs[i], sm.kind, float64(sm.get(st)))
	}
	ready := 0.0
	if m.opts.Ready() == nil {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, ready)
	if m.opts.Roles == nil {
		return
	}
	for table, roles := range m.opts.Roles() {
		for _, r := range roles {
			labels := []string{table, strconv.Itoa(int(r.Partition)), r.Role}
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(r.LagRecords), labels...)
			ch <- prometheus.MustNewConstMetric(replayedDesc, prometheus.CounterValue, float64(r.Replayed), labels...)
		}
	}
}

// observe is the outermost middleware: it turns handler errors into answers
// (so that the final status is known), then counts and times the request.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err)
		}
		route, ok := s.metrics.routes[c.Path()]
		if !ok {
			route = unmatchedRoute
		}
		method, status, elapsed := methodLabel(c.Request().Method), c.Response().Status, time.Since(start)
		s.metrics.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
		s.metrics.duration.WithLabelValues(route, method).Observe(elapsed.Seconds())
		s.log.Debug("http request", "method", method, "route", route, "status", status, "duration", elapsed)
		return nil
	}
}

// methodLabel returns m for standard methods and "other" for anything else,
// so that odd clients cannot grow the label set.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// openAPIPath turns an echo route path ("/movies/:id") into OpenAPI's.
func openAPIPath(p string) string {
	return echoParam.ReplaceAllString(p, "$1{$2}")
}

// echoParam is a parameter segment of an echo route path.
var echoParam = regexp.MustCompile(`(^|/):([^/]*)`)
