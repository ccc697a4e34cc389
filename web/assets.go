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
)

// assets holds the dashboard page and the Swagger UI files.
//
//go:embed assets
var assets embed.FS

// gzipMinSize is the smallest asset worth compressing.
const gzipMinSize = 1024

// gzipCache holds the gzip form ([]byte) of embedded assets by name,
// compressed on first request rather than on every one (the Swagger UI
// bundle is 1.7 MB).
var gzipCache sync.Map

// gzipped returns the compressed form of the embedded file name with
// content b.
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
// accepts it), or returns a 404 error when there is none. name must be one
// path element.
func serveAsset(c echo.Context, dir, name string) error {
	if name == "" || name != path.Base(name) || !fs.ValidPath(name) {
		return notFound("no file %q", name)
	}
	full := dir + "/" + name
	b, err := assets.ReadFile(full)
	if err != nil {
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
