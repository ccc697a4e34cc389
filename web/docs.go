package web

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPI is the hand-written OpenAPI 3 document of every route.
//
//go:embed openapi.json
var openAPI []byte

// apiDocs answers GET /api-docs: the OpenAPI document.
func (s *Server) apiDocs(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-cache")
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPI)
}

// swaggerRedirect answers GET /swagger-ui with a redirect to /swagger-ui/,
// where the relative asset URLs of the page resolve.
func (s *Server) swaggerRedirect(c echo.Context) error {
	return c.Redirect(http.StatusMovedPermanently, "swagger-ui/")
}

// swaggerIndex answers GET /swagger-ui/: the Swagger UI page, reading
// ../api-docs.
func (s *Server) swaggerIndex(c echo.Context) error {
	return serveAsset(c, "assets/swagger-ui", "index.html")
}

// swaggerAsset answers GET /swagger-ui/{file}: the embedded Swagger UI
// files (pinned swagger-ui-dist, see assets/swagger-ui/README.md).
func (s *Server) swaggerAsset(c echo.Context) error {
	return serveAsset(c, "assets/swagger-ui", c.Param("file"))
}
