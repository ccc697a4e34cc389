package web

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestServeGracefulShutdown cancels Serve's context while a request is in
// flight: the request must still complete, new connections must be refused,
// and Serve must return nil.
func TestServeGracefulShutdown(t *testing.T) {
	fq := newFake(mv(362, 2, 18))
	fq.entered, fq.release = make(chan struct{}, 1), make(chan struct{})
	s := New(Options{Tables: []Table{fq}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()

	type result struct {
		status int
		body   movieJSON
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get(base + "/movies/362")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		var r result
		r.status = resp.StatusCode
		r.err = json.NewDecoder(resp.Body).Decode(&r.body)
		got <- r
	}()

	select {
	case <-fq.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("request did not reach the querier")
	}
	cancel()
	// Shutdown closes the listener first: wait until new connections fail.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still accepts connections after cancel")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v before the in-flight request finished", err)
	default:
	}
	close(fq.release)

	r := <-got
	if r.err != nil || r.status != http.StatusOK || r.body != (movieJSON{MovieID: 362, Rating: 9, Count: 2}) {
		t.Errorf("in-flight request: status %d body %+v err %v, want 200 movie 362", r.status, r.body, r.err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil after graceful shutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after shutdown")
	}
}

// serveEmpty serves a Server without a store on a loopback port until the
// returned cancel; Serve's result arrives on served.
func serveEmpty(t *testing.T) (net.Listener, context.CancelFunc, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- New(Options{}).Serve(ctx, ln) }()
	return ln, cancel, served
}

// TestServeExitsDespiteUnusedConnection cancels Serve's context while a
// client holds a connection it has not sent a request on yet (a spare
// connection some clients open ahead): net/http's Shutdown would wait 5 s
// for it; Serve must close it and return at once. A keep-alive connection
// that did serve a request is idle and closed too.
func TestServeExitsDespiteUnusedConnection(t *testing.T) {
	ln, cancel, served := serveEmpty(t)
	client := &http.Client{Transport: &http.Transport{}}
	resp, err := client.Get("http://" + ln.Addr().String() + "/healthz") // leaves an idle keep-alive
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	unused, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer unused.Close()
	// The server must have accepted it (StateNew) before the cancel: a
	// second request on another connection proves the accept loop passed it.
	resp, err = http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	start := time.Now()
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Serve took %v to return, want well under net/http's 5 s wait for unused connections", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if err := unused.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := unused.Read(make([]byte, 1)); err == nil {
		t.Errorf("the unused connection is still open after Serve returned (read %d bytes)", n)
	}
}

func TestListenAndServeErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tests := []struct{ name, addr string }{
		{"port in use", ln.Addr().String()},
		{"bad address", "127.0.0.1:notaport"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := New(Options{}).ListenAndServe(t.Context(), tc.addr)
			if err == nil {
				t.Fatalf("ListenAndServe(%q) = nil, want an error", tc.addr)
			}
			t.Logf("error: %v", err)
		})
	}
}

func TestServeStopsOnContext(t *testing.T) {
	ln, cancel, served := serveEmpty(t)
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz over TCP: status %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}
