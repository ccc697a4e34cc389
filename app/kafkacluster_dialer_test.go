//go:build unix

package app_test

import (
	"errors"
	"net"
	"sync"
	"time"
)

// fenceDialer dials the rating feed's broker connections and cuts those
// to a broker that a recent answer of the stall monitor left out (Kafka
// fenced it), as keepstate's own clients do. A paused broker still
// accepts connections and holds what is sent on them: the feed's
// produce, and sarama's metadata requests when they start at it, waited
// out their read timeouts one after another, and its partition's input
// stopped for seconds after Kafka's fence (16 s measured), which the
// stall monitor counted as keepstate's stall. Safe for concurrent use.
type fenceDialer struct {
	d      net.Dialer
	mu     sync.Mutex
	conns  map[string]map[*fencedConn]struct{} // broker address → open connections
	views  map[string]brokerAnswer             // answering broker → its last answer
	fenced map[string]bool
}

// brokerAnswer is the brokers one metadata answer listed.
type brokerAnswer struct {
	at     time.Time
	listed map[string]bool
}

// fenceViewAge is how long a broker's answer counts (see observe).
const fenceViewAge = time.Second

func newFenceDialer() *fenceDialer {
	return &fenceDialer{
		d:      net.Dialer{Timeout: time.Second},
		conns:  map[string]map[*fencedConn]struct{}{},
		views:  map[string]brokerAnswer{},
		fenced: map[string]bool{},
	}
}

// Dial connects to addr unless the cluster fenced it.
func (f *fenceDialer) Dial(network, addr string) (net.Conn, error) {
	f.mu.Lock()
	fenced := f.fenced[addr]
	f.mu.Unlock()
	if fenced {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errFencedBroker}
	}
	c, err := f.d.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	fc := &fencedConn{Conn: c, f: f, addr: addr}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fenced[addr] { // fenced while dialing
		_ = c.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Err: errFencedBroker}
	}
	if f.conns[addr] == nil {
		f.conns[addr] = map[*fencedConn]struct{}{}
	}
	f.conns[addr][fc] = struct{}{}
	return fc, nil
}

// observe takes the brokers listed by from's answer, of the cluster's
// brokers all: a broker is fenced while a recent answer leaves it out
// (its connections are closed when it becomes so), and no longer once
// every recent answer lists it.
func (f *fenceDialer) observe(from string, listed map[string]bool, all []string) {
	var cut []*fencedConn
	now := time.Now()
	f.mu.Lock()
	f.views[from] = brokerAnswer{at: now, listed: listed}
	for _, a := range all {
		out := false
		for _, v := range f.views {
			if now.Sub(v.at) <= fenceViewAge && !v.listed[a] {
				out = true
			}
		}
		switch {
		case out && !f.fenced[a]:
			f.fenced[a] = true
			for c := range f.conns[a] {
				cut = append(cut, c)
			}
		case !out:
			delete(f.fenced, a)
		}
	}
	f.mu.Unlock()
	for _, c := range cut {
		_ = c.Close()
	}
}

// errFencedBroker fails a dial to a fenced broker.
var errFencedBroker = errors.New("broker fenced by the cluster (left out of its metadata)")

// fencedConn is a connection fenceDialer tracks until it is closed.
type fencedConn struct {
	net.Conn
	f    *fenceDialer
	addr string
	once sync.Once
}

func (c *fencedConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		c.f.mu.Lock()
		delete(c.f.conns[c.addr], c)
		c.f.mu.Unlock()
		err = c.Conn.Close()
	})
	return err
}
