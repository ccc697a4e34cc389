package web

import (
	"bytes"
	"compress/gzip"
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

// assets holds the dashboard page and the Swagger UI files.
//
//go:embed assets
var assets embed.FS

// openAPI is the hand-written OpenAPI 3 document of every route.
//
//go:embed openapi.json
var openAPI []byte

// gzipMinSize is the smallest asset worth compressing.
const gzipMinSize = 1024

// dashboardCSP keeps the dashboard to its own files: no inline script, no other origin.
const dashboardCSP = "default-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'"

// gzipCache holds the gzip form ([]byte) of embedded assets by name,
// compressed once (the Swagger UI bundle is 1.7 MB).
var gzipCache sync.Map

// gzipped returns the compressed form of the embedded file name, b.
func gzipped(name string, b []byte) []byte {
	if z, ok := gzipCache.Load(name); ok {
		return z.([]byte)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b) // writes to a bytes.Buffer cannot fail
	_ = zw.Close()
	z, _ := gzipCache.LoadOrStore(name, buf.Bytes())
	return z.([]byte)
}

// acceptsGzip reports whether the request's Accept-Encoding allows gzip.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			q := strings.ReplaceAll(params, " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

// serveAsset writes the embedded file dir/name (gzipped when the client
// accepts it), or a 404 error; name must be one path element.
func serveAsset(c echo.Context, dir, name string) error {
	full := dir + "/" + name
	b, err := assets.ReadFile(full)
	if err != nil || name == "" || name != path.Base(name) || !fs.ValidPath(name) {
		return notFound("no file %q", name)
	}
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "text/plain; charset=utf-8"
	}
	h := c.Response().Header()
	h.Set("Cache-Control", "no-cache")
	if len(b) >= gzipMinSize {
		h.Add("Vary", "Accept-Encoding")
		if acceptsGzip(c.Request()) {
			h.Set("Content-Encoding", "gzip")
			b = gzipped(full, b)
		}
	}
	return c.Blob(http.StatusOK, ctype, b)
}

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

// readyz answers GET /readyz: 200 when Options.Ready is nil, else 503.
func (s *Server) readyz(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	if err := s.opts.Ready(); err != nil {
		return c.JSON(http.StatusServiceUnavailable, healthBody{Status: "not ready", Reason: err.Error()})
	}
	return c.JSON(http.StatusOK, healthBody{Status: "ready"})
}

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

// apiDocs answers GET /api-docs: the OpenAPI document.
func (s *Server) apiDocs(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-cache")
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPI)
}

// assetIndex answers GET of dir: its index.html, with the CSP if any.
func assetIndex(dir, csp string) echo.HandlerFunc {
	return func(c echo.Context) error {
		if csp != "" {
			c.Response().Header().Set("Content-Security-Policy", csp)
		}
		return serveAsset(c, dir, "index.html")
	}
}

// assetFile answers GET {dir}/{file}: the dashboard's files or the Swagger
// UI's (pinned swagger-ui-dist, see assets/swagger-ui/README.md).
func assetFile(dir string) echo.HandlerFunc {
	return func(c echo.Context) error { return serveAsset(c, dir, c.Param("file")) }
}
