package web

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// healthBody is the body of /healthz and /readyz.
type healthBody struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// healthz answers GET /healthz: 200 whenever the process serves HTTP.
func (s *Server) healthz(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, healthBody{Status: "ok"})
}

// readyz answers GET /readyz: 200 when Options.Ready returns nil, else 503
// with the reason.
func (s *Server) readyz(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	if err := s.opts.Ready(); err != nil {
		return c.JSON(http.StatusServiceUnavailable, healthBody{Status: "not ready", Reason: err.Error()})
	}
	return c.JSON(http.StatusOK, healthBody{Status: "ready"})
}
