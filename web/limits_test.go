package web

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve runs s on a real loopback socket until the test ends and returns
// its host:port.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// rawExchange writes req on a new connection and returns what the server
// answered and how long until it closed the connection (it gives up after
// wait).
func rawExchange(t *testing.T, addr, req string, wait time.Duration) (answer string, closedAfter time.Duration, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = c.SetReadDeadline(start.Add(wait))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return string(b), time.Since(start), false
	}
	return string(b), time.Since(start), true
}

func statusLine(answer string) string {
	line, _, _ := strings.Cut(answer, "\r\n")
	return line
}

// TestSlowClientsAreCut holds connections open the way a slowloris client
// does; each must be closed by the server's read timeouts.
func TestSlowClientsAreCut(t *testing.T) {
	s := New(Options{Tables: []Table{newFake()}, ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 600 * time.Millisecond})
	addr := serve(t, s)
	tests := []struct {
		name       string
		req        string
		wantStatus string // "" when the server closes without answering
	}{
		{"body declared never sent", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n", "HTTP/1.1 200 OK"},
		{"body sent halfway", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n" + strings.Repeat("a", 1000), "HTTP/1.1 200 OK"},
		{"headers never finished", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer, after, closed := rawExchange(t, addr, tt.req, 10*time.Second)
			if !closed {
				t.Fatalf("connection still open after %v (answer %q), want it closed by the read timeout", after, answer)
			}
			if after > 5*time.Second {
				t.Errorf("connection closed after %v, want within a few read timeouts", after)
			}
			if got := statusLine(answer); tt.wantStatus != "" && got != tt.wantStatus {
				t.Errorf("status line %q, want %q", got, tt.wantStatus)
			}
		})
	}
}

func TestHeaderSizeIsLimited(t *testing.T) {
	addr := serve(t, New(Options{Tables: []Table{newFake()}}))
	req := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n"
	answer, _, _ := rawExchange(t, addr, req, 10*time.Second)
	if got := statusLine(answer); !strings.HasPrefix(got, "HTTP/1.1 431") {
		t.Errorf("64 kB header: status line %q, want 431", got)
	}
	req = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Small: " + strings.Repeat("a", 4<<10) + "\r\nConnection: close\r\n\r\n"
	answer, _, _ = rawExchange(t, addr, req, 10*time.Second)
	if got := statusLine(answer); got != "HTTP/1.1 200 OK" {
		t.Errorf("4 kB header: status line %q, want 200", got)
	}
}

// TestHeadOnEveryRoute sends HEAD to every registered route over a real
// socket: none may be 405, and no body comes back.
func TestHeadOnEveryRoute(t *testing.T) {
	s := New(Options{Tables: []Table{newFake(mv(362, 2, 18))}})
	addr := serve(t, s)
	fill := strings.NewReplacer(":id", "362", ":file", "index.html")
	seen := map[string]bool{}
	for _, r := range s.e.Routes() {
		if r.Method != http.MethodGet || seen[r.Path] {
			continue
		}
		seen[r.Path] = true
		path := fill.Replace(r.Path)
		t.Run(path, func(t *testing.T) {
			c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			get, err := c.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			get.Body.Close()
			resp, err := c.Head("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != get.StatusCode {
				t.Errorf("HEAD %s = %d, GET = %d; want the same status", path, resp.StatusCode, get.StatusCode)
			}
			if len(body) != 0 {
				t.Errorf("HEAD %s returned a %d-byte body", path, len(body))
			}
		})
	}
	if len(seen) < 12 {
		t.Errorf("only %d GET routes checked", len(seen))
	}
}

// TestMalformedInputOverSocket sends, over a real socket, a query string
// with broken percent-encoding (a 400, never ignored) and a long bad id
// (a 400 that does not echo it).
func TestMalformedInputOverSocket(t *testing.T) {
	addr := serve(t, New(Options{Tables: []Table{newFake(mv(362, 2, 18))}}))
	longID := strings.Repeat("9", 12000) + "x"
	tests := []struct {
		name, target, want string
		maxBody            int
	}{
		{"broken cursor escape", "/movies?minAvg=8&after=%%%garbage", "query string", 300},
		{"broken name escape", "/movies?min%zzAvg=8", "query string", 300},
		{"long bad id", "/movies/" + longID, "not a 64-bit integer", 300},
		{"long bad limit", "/movies?limit=" + longID, "parameter limit", 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "GET "+tt.target+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d (%s), want 400", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q, want JSON", ct)
			}
			if !strings.Contains(string(body), tt.want) {
				t.Errorf("body %q does not mention %q", body, tt.want)
			}
			if len(body) > tt.maxBody {
				t.Errorf("body is %d bytes for a %d-byte request, want at most %d", len(body), len(tt.target), tt.maxBody)
			}
		})
	}
}
