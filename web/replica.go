package web

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

// ReplicaReader is an optional ability of a Table, safe for concurrent use:
// reading a key from a standby copy on this instance when the partition's
// active cannot answer (engine.TableView.GetReplica).
type ReplicaReader interface {
	// GetReplica returns key's document from this instance's standby copy
	// and how stale the copy is: ErrUnavailable when there is none that
	// may answer, ErrNotFound when it has no such document.
	GetReplica(ctx context.Context, key []byte) (engine.Doc, engine.Staleness, error)
}

// ReplicaQuerier is an optional ability of a Table: answering an index query
// from this instance's standby copies (engine.TableView.QueryReplicas).
type ReplicaQuerier interface {
	// QueryReplicas answers q from the caught-up standby copies here and
	// returns the partitions it covers, sorted.
	QueryReplicas(ctx context.Context, q engine.IndexQuery) (engine.DocPage, []int32, error)
}

// copyStaleness is an optional ability of a Table: how stale this
// instance's copy of a partition is (engine.TableView.ReplicaStaleness).
type copyStaleness interface {
	ReplicaStaleness(p int32) (engine.Staleness, bool)
}

// replicaParam=1 on a forwarded request asks the peer for its standby copy's answer.
const replicaParam = "replica"

// ActiveOnlyParam is the query parameter that, set to true, asks for an
// answer from the partition's active only: 503 rather than a standby's.
const ActiveOnlyParam = "activeOnly"

// Headers of an answer from a copy: ReplicaHeader names it ("standby", or
// "unconfirmed": the active's own copy while its group membership is
// unconfirmed), LagRecordsHeader how many changelog offsets it was behind
// at its last read, LagMillisHeader how long ago that read ended.
const (
	ReplicaHeader    = "Keepstate-Replica"
	LagRecordsHeader = "Keepstate-Lag-Records"
	LagMillisHeader  = "Keepstate-Lag-Ms"
)

// staleJSON is the staleness of a copy's answer (see ReplicaHeader).
type staleJSON struct {
	Records     int64 `json:"records"`
	Ms          int64 `json:"ms"`
	Unconfirmed bool  `json:"unconfirmed,omitempty"`
}

// setStaleHeaders marks the response as a copy's answer, unless st is nil.
func setStaleHeaders(c echo.Context, st *staleJSON) {
	if st == nil {
		return
	}
	h := c.Response().Header()
	h.Set(ReplicaHeader, "standby")
	if st.Unconfirmed {
		h.Set(ReplicaHeader, "unconfirmed")
	}
	h.Set(LagRecordsHeader, strconv.FormatInt(st.Records, 10))
	h.Set(LagMillisHeader, strconv.FormatInt(st.Ms, 10))
}

// replicaDoc answers key from this instance's standby copy, or from its
// unconfirmed own copy. A key missing from a copy is ErrUnavailable, not
// ErrNotFound: the copy may be behind (a warm-up within the acceptable lag
// lacks the keys of the records it has still to read), and a "not found"
// carries no staleness, so it would pass for the current answer.
func (s *Server) replicaDoc(ctx context.Context, rr ReplicaReader, t Table, spec engine.TableSpec, key []byte) (tableItem, error) {
	d, st, err := rr.GetReplica(ctx, key)
	if errors.Is(err, engine.ErrNotFound) {
		return tableItem{}, fmt.Errorf("%s key %s: not in this instance's copy (%d records behind at its last read, %v ago): %w",
			spec.Name, quoteInput(t.FormatKey(key)), st.Records, st.Age.Round(time.Millisecond), engine.ErrUnavailable)
	}
	if err != nil {
		return tableItem{}, err
	}
	it, err := localItem(t, spec, -1, d)
	if err != nil {
		return tableItem{}, err
	}
	it.doc.Stale = &staleJSON{Records: st.Records, Ms: st.Age.Milliseconds(), Unconfirmed: st.Unconfirmed}
	return it, nil
}

// peerReplicaDoc asks the instances keeping a standby copy of key's
// partition, in turn, for key from their copy. An answer from an
// unconfirmed copy is kept only if no other instance answers.
func (s *Server) peerReplicaDoc(ctx context.Context, t Table, spec engine.TableSpec, key []byte) (tableItem, error) {
	m, err := t.Membership(ctx)
	if err != nil || m.Partitions <= 0 {
		return tableItem{}, fmt.Errorf("no membership: %w", engine.ErrUnavailable)
	}
	shown := t.FormatKey(key)
	p := engine.PartitionFor(key, m.Partitions)
	// The owner too (a standby just promoted answers from its copy while
	// it restores), then every member (the assignment known here may be a
	// generation old). Each gets peerKeyTimeout.
	asked := append(append(slices.Clone(m.Replicas[p]), m.Owners[p]), m.Members...)
	seen := map[string]bool{m.Self: true, "": true}
	var held *tableItem
	for _, addr := range asked {
		if seen[addr] {
			continue
		}
		seen[addr] = true
		pctx, cancel := context.WithTimeout(ctx, peerKeyTimeout)
		it, err := s.peerDoc(pctx, addr, t, spec, shown, url.Values{replicaParam: {"1"}})
		cancel()
		switch {
		case errors.Is(err, engine.ErrNotFound):
			return tableItem{}, err
		case err != nil:
		case it.doc.Stale == nil || !it.doc.Stale.Unconfirmed:
			return it, nil
		case held == nil:
			held = &it
		}
	}
	if held != nil {
		return *held, nil
	}
	return tableItem{}, fmt.Errorf("no standby of %s key %s answered: %w", spec.Name, quoteInput(shown), engine.ErrUnavailable)
}

// staleness returns cs's staleness of p; ok is false without cs.
func staleness(cs copyStaleness, p int32) (engine.Staleness, bool) {
	if cs == nil {
		return engine.Staleness{}, false
	}
	return cs.ReplicaStaleness(p)
}

// fillFromReplicas answers the partitions g is missing from standby
// copies: this instance's, then every instance mem names (each answers the
// partitions it can: mem may be a generation old).
func (s *Server) fillFromReplicas(ctx context.Context, tq tableQuery, rq ReplicaQuerier, mem engine.Membership, g gathered[tableItem]) gathered[tableItem] {
	missing := setOf(g.missing)
	// Round two sees the partitions answered already as covered here, so
	// that only the missing ones are asked for and reported.
	var covered []int32
	for p := int32(0); p < mem.Partitions; p++ {
		if !missing[p] {
			covered = append(covered, p)
		}
	}
	// This instance's unconfirmed own copies answer last: any peer's copy
	// of those partitions is preferred.
	var mine, held []tableItem
	unconfirmed := map[int32]bool{}
	if page, parts, err := rq.QueryReplicas(ctx, tq.q); err == nil {
		cs, _ := tq.t.(copyStaleness)
		for _, p := range parts {
			switch st, ok := staleness(cs, p); {
			case !missing[p]:
			case ok && st.Unconfirmed:
				unconfirmed[p] = true
			default:
				covered = append(covered, p)
			}
		}
		for _, d := range page.Docs {
			switch it, err := localItem(tq.t, tq.spec, tq.pos, d); {
			case err != nil || !missing[d.Partition]:
			case unconfirmed[d.Partition]:
				held = append(held, it)
			default:
				mine = append(mine, it)
			}
		}
	}
	everyone := slices.AppendSeq(slices.Clone(mem.Members), maps.Values(mem.Owners))
	for _, addrs := range mem.Replicas {
		everyone = append(everyone, addrs...)
	}
	sc := s.tableScatter(tq, engine.Membership{Partitions: mem.Partitions, Self: mem.Self},
		peerPage[tableItem]{items: mine, covered: covered}, true)
	sc.everyone = everyone
	g2, err := gather(ctx, sc)
	if err != nil { // nothing answered, not even here: covered is empty
		if len(unconfirmed) == 0 {
			return g
		}
		g2 = gathered[tableItem]{items: mine, missing: g.missing}
	}
	// This instance's unconfirmed copies answer what no other copy did.
	left := setOf(g2.missing)
	for _, it := range held {
		if left[it.doc.Partition] {
			g2.items = append(g2.items, it)
		}
	}
	g2.missing = slices.DeleteFunc(g2.missing, func(p int32) bool { return unconfirmed[p] })
	for _, p := range g.missing {
		if !slices.Contains(g2.missing, p) {
			g.stale = append(g.stale, p)
		}
	}
	less := func(a, b tableItem) bool { return tq.before(a.cur, b.cur) }
	g.items, g.more = firstN(append(g.items, g2.items...), less, tq.q.Limit, g.more || g2.more)
	g.missing = g2.missing
	return g
}
