package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

// dashboardCSP keeps the dashboard to its own files: no inline script, no
// other origin.
const dashboardCSP = "default-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'"

// statsBody is the body of GET /api/stats, polled by the dashboard.
type statsBody struct {
	Ready  bool      `json:"ready"`
	Reason string    `json:"reason,omitempty"`
	Stats  statsJSON `json:"stats"`
}

// statsJSON mirrors engine.Stats with JSON names.
type statsJSON struct {
	RecordsProcessed   int64 `json:"recordsProcessed"`
	RecordsRekeyed     int64 `json:"recordsRekeyed"`
	DuplicatesSkipped  int64 `json:"duplicatesSkipped"`
	DeadLettered       int64 `json:"deadLettered"`
	ChangelogRestored  int64 `json:"changelogRestored"`
	StoreBatches       int64 `json:"storeBatches"`
	StoreDocsWritten   int64 `json:"storeDocsWritten"`
	FencedWrites       int64 `json:"fencedWrites"`
	TxnCommitted       int64 `json:"transactionsCommitted"`
	TxnAborted         int64 `json:"transactionsAborted"`
	GroupRestarts      int64 `json:"groupRestarts"`
	PartitionsAssigned int64 `json:"partitionsAssigned"`
	PartitionsRunning  int64 `json:"partitionsRunning"`
}

func toStatsJSON(st engine.Stats) statsJSON {
	return statsJSON{
		RecordsProcessed:   st.RecordsProcessed,
		RecordsRekeyed:     st.RecordsRekeyed,
		DuplicatesSkipped:  st.DuplicatesSkipped,
		DeadLettered:       st.DeadLettered,
		ChangelogRestored:  st.ChangelogRestored,
		StoreBatches:       st.StoreBatches,
		StoreDocsWritten:   st.StoreDocsWritten,
		FencedWrites:       st.FencedWrites,
		TxnCommitted:       st.TransactionsCommitted,
		TxnAborted:         st.TransactionsAborted,
		GroupRestarts:      st.GroupRestarts,
		PartitionsAssigned: st.PartitionsAssigned,
		PartitionsRunning:  st.PartitionsRunning,
	}
}

// apiStats answers GET /api/stats: readiness and the engine counters.
func (s *Server) apiStats(c echo.Context) error {
	body := statsBody{Ready: true, Stats: toStatsJSON(s.opts.Stats())}
	if err := s.opts.Ready(); err != nil {
		body.Ready, body.Reason = false, err.Error()
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, body)
}

// dashboardIndex answers GET /: the dashboard page.
func (s *Server) dashboardIndex(c echo.Context) error {
	c.Response().Header().Set("Content-Security-Policy", dashboardCSP)
	return serveAsset(c, "assets/dashboard", "index.html")
}

// dashboardAsset answers GET /dashboard/{file}: the page's script and style.
func (s *Server) dashboardAsset(c echo.Context) error {
	return serveAsset(c, "assets/dashboard", c.Param("file"))
}
