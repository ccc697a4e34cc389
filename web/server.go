package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keepstate/keepstate/engine"
)

// DefaultShutdownTimeout is Options.ShutdownTimeout when zero.
const DefaultShutdownTimeout = 10 * time.Second

// Options configures a Server. Every field has a usable zero value; the
// tables to serve are in Tables.
type Options struct {
	// Ready reports readiness for /readyz and the dashboard: nil means
	// ready, else the reason it is not; a nil func means always ready.
	// Ready, Stats and Roles are called concurrently from request goroutines.
	Ready func() error
	// Stats returns the engine counters for /metrics and /api/stats; a nil
	// func reports zeros.
	Stats func() engine.Stats
	// Roles returns, by table, the partitions this instance holds and in
	// which role (active, standby, warm-up); a nil func reports none.
	Roles func() map[string][]engine.PartitionRole
	// Tables are the jobs' tables served under /tables (see Table); the
	// routes serve the first of a name. The movie job's table (movies.Spec)
	// is served at /movies too; without it the movie routes answer 503.
	Tables []Table
	// Logger receives request errors and server events; nil discards them.
	Logger *slog.Logger
	// QueryTimeout bounds each store query (5 s when zero); a query that
	// runs out of time answers 503 with Retry-After.
	QueryTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown of Serve after its
	// context is cancelled (DefaultShutdownTimeout when zero).
	ShutdownTimeout time.Duration
	// PeerSecret authenticates requests forwarded between instances (see
	// ForwardedHeader); every instance of a deployment needs the same one.
	// When empty, this instance neither accepts nor gets forwarded answers.
	PeerSecret []byte
	// ReadHeaderTimeout, ReadTimeout, IdleTimeout and MaxHeaderBytes bound
	// what a client may hold (5 s, 10 s, 60 s and 16 KiB when zero). The
	// write timeout allows for QueryTimeout, the longest wait for a peer.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
}

// Server is keepstate's HTTP server. It is safe for concurrent use; Serve
// may be called several times (for example on several listeners).
type Server struct {
	client  *http.Client // for routed requests
	auth    peerAuth
	opts    Options
	tables  []Table // Options.Tables without nils, the first of each name
	log     *slog.Logger
	e       *echo.Echo
	metrics *metrics
}

// New returns a Server for opts with every route registered; it does not listen.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Ready == nil {
		opts.Ready = func() error { return nil }
	}
	if opts.Stats == nil {
		opts.Stats = func() engine.Stats { return engine.Stats{} }
	}
	orDefault(&opts.QueryTimeout, 5*time.Second)
	orDefault(&opts.ShutdownTimeout, DefaultShutdownTimeout)
	orDefault(&opts.ReadHeaderTimeout, 5*time.Second)
	orDefault(&opts.ReadTimeout, 10*time.Second)
	orDefault(&opts.IdleTimeout, 60*time.Second)
	orDefault(&opts.MaxHeaderBytes, 16<<10)
	s := &Server{opts: opts, log: opts.Logger, auth: newPeerAuth(opts.PeerSecret), client: &http.Client{
		Timeout: opts.QueryTimeout,
		// A peer is asked one fixed URL; a redirect is never followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, e: echo.New(), metrics: newMetrics(opts)}
	seen := map[string]bool{}
	for _, t := range opts.Tables {
		if t == nil {
			continue
		}
		if name := t.Spec().Name; seen[name] {
			s.log.Warn("two tables share a name: the routes serve the first", "table", name)
		} else {
			seen[name] = true
			s.tables = append(s.tables, t)
		}
	}
	s.e.HideBanner, s.e.HidePort = true, true
	s.e.HTTPErrorHandler = s.handleError
	s.e.Logger.SetOutput(logAdapter{s.log})
	s.e.Use(s.observe, s.recoverPanic, secureHeaders)
	s.routes()
	for _, r := range s.e.Routes() {
		s.metrics.routes[r.Path] = openAPIPath(r.Path)
	}
	return s
}

// orDefault sets *v to def when it is not positive.
func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// routes registers every route for GET and HEAD (whose body is dropped);
// openapi.json lists exactly these (TestOpenAPICoversRoutes checks it).
func (s *Server) routes() {
	get := func(path string, h echo.HandlerFunc) { s.e.Match([]string{http.MethodGet, http.MethodHead}, path, h) }
	get("/movies/:id", s.getMovie)
	get("/movies", s.rangeMovies)
	get("/tables", s.listTables)
	get("/tables/:table", s.queryTable)
	get("/tables/:table/:key", s.getTableDoc)
	get("/healthz", s.healthz)
	get("/readyz", s.readyz)
	get("/metrics", echo.WrapHandler(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{
		ErrorLog: logAdapter{s.log}, ErrorHandling: promhttp.ContinueOnError, Registry: s.metrics.reg,
	})))
	get("/api-docs", s.apiDocs)
	get("/api/stats", s.apiStats)
	get("/", assetIndex("assets/dashboard", dashboardCSP))
	get("/dashboard/:file", assetFile("assets/dashboard"))
	// The relative asset URLs of the Swagger UI page resolve under /swagger-ui/.
	get("/swagger-ui", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, "swagger-ui/") })
	get("/swagger-ui/", assetIndex("assets/swagger-ui", ""))
	get("/swagger-ui/:file", assetFile("assets/swagger-ui"))
}

// Handler returns the server's http.Handler, for tests or for mounting.
func (s *Server) Handler() http.Handler { return s.e }

// Serve answers HTTP on ln (and closes it) until ctx is cancelled, then
// shuts down gracefully, waiting up to ShutdownTimeout for in-flight
// requests. It returns nil after a clean shutdown, else the error.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	o := s.opts
	srv := &http.Server{Handler: s.e, ReadHeaderTimeout: o.ReadHeaderTimeout, ReadTimeout: o.ReadTimeout,
		WriteTimeout: o.ReadTimeout + 2*o.QueryTimeout, IdleTimeout: o.IdleTimeout, MaxHeaderBytes: o.MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	var fresh sync.Map // the connections that have not sent a request yet
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			fresh.Store(c, nil)
		} else {
			fresh.Delete(c)
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("http server listening", "addr", ln.Addr().String())

	select {
	case err := <-errc:
		return fmt.Errorf("serve http on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	// Shutdown waits up to 5 s for a connection that has not sent a request
	// yet (a client's spare one) in case one is on its way; that only delays
	// the exit, so such connections are closed at once.
	fresh.Range(func(c, _ any) bool {
		_ = c.(net.Conn).Close()
		fresh.Delete(c)
		return true
	})
	err := <-shut
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		s.log.Warn("http serve ended with error during shutdown", "err", serr)
	}
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown http on %s: %w", ln.Addr(), err)
	}
	s.log.Info("http server stopped", "addr", ln.Addr().String())
	return nil
}

// ListenAndServe listens on the TCP address addr (host:port) and calls Serve.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen http on %s: %w", addr, err)
	}
	return s.Serve(ctx, ln)
}

// logAdapter forwards echo's own (rare) log lines and promhttp's errors to slog.
type logAdapter struct{ log *slog.Logger }

func (l logAdapter) Write(p []byte) (int, error) {
	l.log.Warn("echo", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}

func (l logAdapter) Println(v ...any) { l.log.Warn("metrics exposition", "err", fmt.Sprint(v...)) }

// secureHeaders sets headers that are right for every response.
func secureHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("X-Content-Type-Options", "nosniff")
		return next(c)
	}
}
