// Package fencedial dials Kafka broker connections and cuts those to a
// broker the cluster has fenced.
//
// A broker that stops answering without closing its connections (paused,
// cut off) holds every request sent to it until the client's read timeout
// (10 to 30 s), long after the controller fenced it (missed heartbeats for
// broker.session.timeout.ms, 9 s by default) and left it out of every
// metadata answer; a client may even dial it again, as it still accepts
// connections. A Dialer is told each broker's metadata answers (Observe): a
// broker a recent answer leaves out is fenced, its connections are closed
// (failing the requests waiting on them at once, so the clients retry on
// the new leaders), and dials to it fail with ErrFenced until every recent
// answer lists it again.
package fencedial

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"
)

// ErrFenced fails a dial to a fenced broker.
var ErrFenced = errors.New("fenced by the cluster (left out of its metadata); not dialing it until it is back")

// Dialer dials broker connections (its Dial fits sarama's Net.Proxy.Dialer)
// and cuts those to fenced brokers. Safe for concurrent use.
type Dialer struct {
	d       net.Dialer
	viewAge time.Duration

	mu     sync.Mutex
	conns  map[string]map[*conn]struct{} // broker address → open connections
	listed map[string]bool               // brokers ever in an answer
	views  map[string]view               // each answering broker's last answer
	fenced map[string]bool
}

// view is one broker's last answer: when, and the brokers it listed.
type view struct {
	at    time.Time
	addrs map[string]bool
}

// New returns a Dialer that dials with d and counts an answer as recent for viewAge.
func New(d net.Dialer, viewAge time.Duration) *Dialer {
	return &Dialer{d: d, viewAge: viewAge, conns: map[string]map[*conn]struct{}{},
		listed: map[string]bool{}, views: map[string]view{}, fenced: map[string]bool{}}
}

// Dial connects to addr, unless the cluster has fenced it (ErrFenced).
func (f *Dialer) Dial(network, addr string) (net.Conn, error) {
	if f.Fenced(addr) {
		return nil, fmt.Errorf("broker %s: %w", addr, ErrFenced)
	}
	c, err := f.d.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	tc := &conn{Conn: c, f: f, addr: addr}
	f.mu.Lock()
	fenced := f.fenced[addr] // fenced while dialing: its cut missed this one
	if !fenced {
		if f.conns[addr] == nil {
			f.conns[addr] = map[*conn]struct{}{}
		}
		f.conns[addr][tc] = struct{}{}
	}
	f.mu.Unlock()
	if fenced {
		_ = c.Close()
		return nil, fmt.Errorf("broker %s: %w", addr, ErrFenced)
	}
	return tc, nil
}

// Fenced reports whether the broker at addr is fenced.
func (f *Dialer) Fenced(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fenced[addr]
}

// Listed returns every broker some answer has listed, sorted.
func (f *Dialer) Listed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.listed))
}

// Observe takes the brokers of one answer, given by broker from (at now),
// and returns the brokers it fenced, whose connections it closed, sorted.
// A broker ever listed is fenced while a recent answer (of the last
// viewAge) leaves it out, and no longer once every recent answer lists it.
// Leaving out is what counts: brokers apply the cluster's metadata in one
// order, so one that still lists a fenced broker is only behind.
func (f *Dialer) Observe(from string, addrs []string, now time.Time) (cut []string) {
	v := view{at: now, addrs: map[string]bool{}}
	var cutConns []*conn
	f.mu.Lock()
	for _, a := range addrs {
		v.addrs[a], f.listed[a] = true, true
	}
	f.views[from] = v
	for a := range f.listed {
		out := false
		for _, v := range f.views {
			if now.Sub(v.at) <= f.viewAge && !v.addrs[a] {
				out = true
			}
		}
		switch {
		case out && !f.fenced[a]:
			f.fenced[a] = true
			cut = append(cut, a)
			cutConns = slices.AppendSeq(cutConns, maps.Keys(f.conns[a]))
		case !out:
			delete(f.fenced, a)
		}
	}
	f.mu.Unlock()
	for _, c := range cutConns {
		_ = c.Close()
	}
	slices.Sort(cut)
	return cut
}

// conn is a broker connection the Dialer can cut.
type conn struct {
	net.Conn
	f    *Dialer
	addr string
	once sync.Once
}

// Close closes the connection once and forgets it.
func (c *conn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		c.f.mu.Lock()
		delete(c.f.conns[c.addr], c)
		c.f.mu.Unlock()
		err = c.Conn.Close()
	})
	return err
}
