package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

// dashboardCSP keeps the dashboard to its own files: no inline script, no
// other origin.
const dashboardCSP = "default-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'"

// statsBody is the body of GET /api/stats, polled by the dashboard: the
// engine's counters under their JSON names (engine.Stats).
type statsBody struct {
	Ready  bool         `json:"ready"`
	Reason string       `json:"reason,omitempty"`
	Stats  engine.Stats `json:"stats"`
	// Partitions are the partitions held here, by table, with their role.
	Partitions map[string][]engine.PartitionRole `json:"partitions,omitempty"`
}

// apiStats answers GET /api/stats: readiness and the engine counters.
func (s *Server) apiStats(c echo.Context) error {
	body := statsBody{Ready: true, Stats: s.opts.Stats()}
	if s.opts.Roles != nil {
		body.Partitions = s.opts.Roles()
	}
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
