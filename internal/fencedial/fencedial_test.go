package fencedial

import (
	"errors"
	"net"
	"slices"
	"testing"
	"time"
)

// TestDialerCutsFencedBroker: a broker listed once and then left
// out of an answer has its connections closed (a request waiting on one
// fails at once) and is not dialed while a recent answer leaves it out,
// even if a lagging broker lists it; once every recent answer lists it,
// it is dialed again.
func TestDialerCutsFencedBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a broker that accepts and never answers, like a paused one
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	addr, other := ln.Addr().String(), "127.0.0.1:1"
	f := New(net.Dialer{}, 2*time.Second)

	t0 := time.Now()
	if cut := f.Observe(other, []string{addr, other}, t0); len(cut) != 0 {
		t.Fatalf("first answer cut %v, want nothing", cut)
	}
	c, err := f.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial a listed broker: %v", err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	if cut := f.Observe(other, []string{other}, t0.Add(time.Second)); !slices.Equal(cut, []string{addr}) {
		t.Fatalf("an answer without %s: cut %v, want [%s]", addr, cut, addr)
	}
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("read on a cut connection: got no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read waiting on the fenced broker was not failed")
	}
	if _, err := f.Dial("tcp", addr); !errors.Is(err, ErrFenced) {
		t.Fatalf("dial a fenced broker: got %v, want %v", err, ErrFenced)
	}
	// A broker that is behind still lists it: it stays fenced while the
	// other's answer is recent.
	if cut := f.Observe("behind", []string{addr, other}, t0.Add(1500*time.Millisecond)); len(cut) != 0 || !f.Fenced(addr) {
		t.Fatalf("a lagging broker's answer: cut %v, fenced %v; want nothing cut, still fenced", cut, f.Fenced(addr))
	}
	// Once every recent answer lists it, it is dialed again.
	f.Observe(other, []string{addr, other}, t0.Add(2*time.Second))
	if f.Fenced(addr) {
		t.Fatal("listed by every recent answer, still fenced")
	}
	c, err = f.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial a broker listed again: %v", err)
	}
	c.Close()
}
