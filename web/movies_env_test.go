package web

import (
	"net/http"
	"testing"
)

// movieServer returns a handler serving ms from one store every instance
// shares (as Redis is); err, when set, is what every store call returns.
func movieServer(t *testing.T, ms []movieStats, err error) http.Handler {
	t.Helper()
	f := newFake(ms...)
	f.err = err
	return New(Options{Tables: []Table{f}}).Handler()
}

// movieServerWithout returns a handler serving no movie job.
func movieServerWithout(t *testing.T) http.Handler {
	t.Helper()
	return New(Options{}).Handler()
}

// movieNode is one instance of a movie cluster (see movieCluster).
type movieNode struct {
	addr string
	n    *node
}

// movieCluster starts n instances on sockets over a 6-partition ownership
// (partition p owned by instance p%n), each holding every movie of ms.
func movieCluster(t *testing.T, secret string, ms []movieStats, n int) []*movieNode {
	t.Helper()
	var out []*movieNode
	for _, nd := range cluster(t, secret, ms, n) {
		out = append(out, &movieNode{addr: nd.addr, n: nd})
	}
	return out
}

// owners returns the node's view of the ownership.
func (m *movieNode) owners() map[int32]string { _, o := m.n.movies.ownership(); return o }

// setOwners replaces the node's view of the ownership.
func (m *movieNode) setOwners(o map[int32]string) { m.n.movies.setOwners(m.addr, o) }

// lapse sets whether the node's read lease has lapsed.
func (m *movieNode) lapse(v bool) { m.n.movies.lapsed.Store(v) }
