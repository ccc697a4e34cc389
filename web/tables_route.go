package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/keepstate/keepstate/engine"
)

// getTableDoc answers GET /tables/{table}/{key}.
func (s *Server) getTableDoc(c echo.Context) error {
	name, rawKey, ok := tableKeyPath(c.Request().URL.EscapedPath())
	if !ok {
		// echo lets a trailing parameter swallow further segments.
		return echo.ErrNotFound
	}
	t, spec, err := s.table(name)
	if err != nil {
		return err
	}
	key, err := t.ParseKey(rawKey)
	if err != nil || len(key) == 0 {
		return badRequest("parameter key: %s is not a valid %s key of table %s", quoteInput(rawKey), t.KeyKind(), spec.Name)
	}
	it, err := s.findDoc(c, t, spec, key)
	if errors.Is(err, engine.ErrNotFound) {
		return notFound("key %s not found in table %s", quoteInput(t.FormatKey(key)), spec.Name)
	}
	if err != nil {
		return err
	}
	setStaleHeaders(c, it.doc.Stale)
	return c.JSON(http.StatusOK, it.doc)
}

// findDoc returns the document of key in t within QueryTimeout: read here
// or (store local to each instance) from the instance running the key's
// partition, whose answer is checked and re-encoded. No document wraps
// engine.ErrNotFound. When the active cannot answer (restoring, moving, dead
// or paused), a caught-up standby copy answers instead (this instance's,
// else a peer's) with its staleness in doc.Stale, unless the request was
// forwarded or asks for activeOnly=true; only an active's "not found" is an
// answer. This instance's unconfirmed own copy answers only if no peer's does.
func (s *Server) findDoc(c echo.Context, t Table, spec engine.TableSpec, key []byte) (tableItem, error) {
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.opts.QueryTimeout)
	defer cancel()
	fwd, err := s.checkForwarded(c)
	if err != nil {
		return tableItem{}, err
	}
	rr, canReplica := t.(ReplicaReader)
	if fwd && c.QueryParam(replicaParam) == "1" && canReplica {
		// A peer asks for whatever copy this instance can answer from.
		if it, err := s.findActiveDoc(ctx, t, spec, key, true); err == nil || errors.Is(err, engine.ErrNotFound) {
			return it, err
		}
		return s.replicaDoc(ctx, rr, t, spec, key)
	}
	it, err := s.findActiveDoc(ctx, t, spec, key, fwd)
	if err == nil || fwd || !canReplica || errors.Is(err, engine.ErrNotFound) || ctx.Err() != nil ||
		c.QueryParam(ActiveOnlyParam) == "true" {
		return it, err
	}
	rit, rerr := s.replicaDoc(ctx, rr, t, spec, key) // never ErrNotFound: a copy may be behind
	if rerr == nil && !rit.doc.Stale.Unconfirmed {
		return rit, nil
	}
	if pit, perr := s.peerReplicaDoc(ctx, t, spec, key); perr == nil || errors.Is(perr, engine.ErrNotFound) {
		return pit, perr
	}
	if rerr == nil {
		return rit, nil // this instance's unconfirmed copy: no one else answered
	}
	return it, err // the active's error says more
}

// peerKeyTimeout bounds the wait for a key's owner before its standby copies are asked.
const peerKeyTimeout = 500 * time.Millisecond

// findActiveDoc is findDoc from the active only; a forwarded (fwd) request is not routed.
func (s *Server) findActiveDoc(ctx context.Context, t Table, spec engine.TableSpec, key []byte, fwd bool) (tableItem, error) {
	shown := t.FormatKey(key)
	if !t.Shared() {
		addr, local, err := t.Owner(ctx, key)
		if err != nil {
			return tableItem{}, fmt.Errorf("route %s key %s: %w", spec.Name, quoteInput(shown), err)
		}
		if !local {
			if fwd {
				return tableItem{}, fmt.Errorf("%s key %s: %w", spec.Name, quoteInput(shown), errNotForwardable)
			}
			// An owner that does not answer at once (paused, cut off) is
			// skipped for a standby copy (see findDoc).
			pctx, cancel := context.WithTimeout(ctx, peerKeyTimeout)
			defer cancel()
			return s.peerDoc(pctx, addr, t, spec, shown, nil)
		}
	}
	d, err := t.Get(ctx, key)
	if err != nil {
		return tableItem{}, fmt.Errorf("get %s key %s: %w", spec.Name, quoteInput(shown), err)
	}
	return localItem(t, spec, -1, d)
}

// peerDoc asks the instance at addr for the document of the key shown and
// checks its answer (see peerItem); a query (replicaParam) asks for its
// standby copy's answer, with the staleness it reports.
func (s *Server) peerDoc(ctx context.Context, addr string, t Table, spec engine.TableSpec, shown string,
	query url.Values) (tableItem, error) {
	rawPath := "/tables/" + url.PathEscape(spec.Name) + "/" + url.PathEscape(shown)
	code, _, body, err := s.tablePeerGet(ctx, addr, rawPath, query)
	if err != nil {
		return tableItem{}, err
	}
	switch code {
	case http.StatusOK:
		var pd tableDocJSON
		if decodeStrict(body, &pd) == nil {
			if it, err := peerItem(t, spec, -1, pd); err == nil && it.doc.Key == shown {
				if query != nil {
					it.doc.Stale = pd.Stale
				}
				return it, nil
			}
		}
		return tableItem{}, fmt.Errorf("instance %s: invalid answer for %s key %s: %w", addr, spec.Name, quoteInput(shown), engine.ErrUnavailable)
	case http.StatusNotFound:
		return tableItem{}, fmt.Errorf("instance %s: %s key %s: %w", addr, spec.Name, quoteInput(shown), engine.ErrNotFound)
	default:
		return tableItem{}, fmt.Errorf("instance %s answered %d for %s key %s: %w", addr, code, spec.Name, quoteInput(shown), engine.ErrUnavailable)
	}
}

// queryTable answers GET /tables/{table}?index=&min=&max=&eq=&order=&limit=&after=.
func (s *Server) queryTable(c echo.Context) error {
	t, spec, err := s.table(c.Param("table"))
	if err != nil {
		return err
	}
	q, pos, kind, err := parseTableQuery(spec, c.Request().URL.RawQuery)
	if err != nil {
		return err
	}
	res, err := s.runQuery(c, tableQuery{t: t, spec: spec, pos: pos, kind: kind, q: q})
	if err != nil {
		return err
	}
	out := tablePageJSON{Table: spec.Name, Index: q.Index, Items: make([]tableDocJSON, 0, len(res.items)),
		Partial: len(res.missing) > 0, MissingPartitions: res.missing, StalePartitions: res.stale}
	for _, it := range res.items {
		out.Items = append(out.Items, it.doc)
	}
	if res.next != nil {
		out.Next = encodeTableCursor(spec.Name, q.Index, kind, *res.next)
	}
	return c.JSON(http.StatusOK, out)
}

// tableQuery is one index query on one table.
type tableQuery struct {
	t    Table
	spec engine.TableSpec
	pos  int // the queried index's position in spec.Indexes
	kind engine.IndexKind
	q    engine.IndexQuery
}

// before reports whether a comes before b in the query's order.
func (tq tableQuery) before(a, b engine.IndexCursor) bool {
	return tq.spec.Before(a, b, tq.kind, tq.q.Desc)
}

// runQuery answers tq within QueryTimeout: from this instance alone on a
// shared store or for a peer's forwarded request (listing the partitions it
// covers in PartitionsHeader), else merged across the owning instances.
func (s *Server) runQuery(c echo.Context, tq tableQuery) (tableResult, error) {
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.opts.QueryTimeout)
	defer cancel()
	local := tq.t.Shared()
	if !local {
		fwd, err := s.checkForwarded(c)
		if err != nil {
			return tableResult{}, err
		}
		local = fwd // a peer asks for this instance's part of the answer
	}
	if !local {
		res, err := s.gatherTable(ctx, tq, c.QueryParam(ActiveOnlyParam) == "true")
		if err != nil {
			return tableResult{}, fmt.Errorf("query %s by %s: %w", tq.spec.Name, tq.q.Index, err)
		}
		return res, nil
	}
	query := tq.t.QueryLocal
	if rq, ok := tq.t.(ReplicaQuerier); ok && c.QueryParam(replicaParam) == "1" && !tq.t.Shared() {
		query = rq.QueryReplicas // a peer asks for this instance's standby copies
	}
	page, covered, err := query(ctx, tq.q)
	if err != nil {
		return tableResult{}, fmt.Errorf("query %s by %s: %w", tq.spec.Name, tq.q.Index, err)
	}
	items, err := localItems(tq, page.Docs)
	if err != nil {
		return tableResult{}, err
	}
	if !tq.t.Shared() {
		c.Response().Header().Set(PartitionsHeader, formatPartitions(covered))
	}
	return tableResult{gathered: gathered[tableItem]{items: items}, next: page.Next}, nil
}

// tableItem is one document with its position in the query's index order.
type tableItem struct {
	doc tableDocJSON
	cur engine.IndexCursor
}

// localItem renders a document of this instance; pos is the queried index
// (-1 for none). A document that does not fit spec is an internal error.
func localItem(t Table, spec engine.TableSpec, pos int, d engine.Doc) (tableItem, error) {
	if len(d.Index) != len(spec.Indexes) {
		return tableItem{}, fmt.Errorf("table %s: document has %d index values for %d indexes",
			spec.Name, len(d.Index), len(spec.Indexes))
	}
	val, err := t.ValueJSON(d)
	if err != nil {
		return tableItem{}, fmt.Errorf("table %s: render value: %w", spec.Name, err)
	}
	if !isJSONObject(val) {
		return tableItem{}, fmt.Errorf("table %s: value is not a JSON object", spec.Name)
	}
	doc := tableDocJSON{Table: spec.Name, Key: t.FormatKey(d.Key), Partition: d.Partition, Version: d.Version,
		Value: val}
	return newItem(spec, pos, d.Key, doc, d.Index), nil
}

// newItem returns the item of doc with key and index values vals.
func newItem(spec engine.TableSpec, pos int, key []byte, doc tableDocJSON, vals []engine.IndexValue) tableItem {
	doc.Index = indexValues{specs: spec.Indexes, vals: vals}
	it := tableItem{doc: doc, cur: engine.IndexCursor{Key: key}}
	if pos >= 0 {
		it.cur.Value = vals[pos]
	}
	return it
}

// localItems renders documents of this instance for tq.
func localItems(tq tableQuery, docs []engine.Doc) ([]tableItem, error) {
	items := make([]tableItem, 0, len(docs))
	for _, d := range docs {
		it, err := localItem(tq.t, tq.spec, tq.pos, d)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

// peerPageJSON is a peer's answer to a forwarded query (never partial).
type peerPageJSON struct {
	Table string         `json:"table"`
	Index string         `json:"index"`
	Items []tableDocJSON `json:"items"`
	Next  string         `json:"next"`
}

// errBadPeerDoc marks a document a peer sent that does not fit the table.
var errBadPeerDoc = errors.New("invalid document")

// peerItem checks a document a peer sent for table t: its table, a key in
// canonical form, a JSON object value, exactly the declared indexes with
// values of their kinds and, on the movie table, a movie (movieOf).
func peerItem(t Table, spec engine.TableSpec, pos int, pd tableDocJSON) (tableItem, error) {
	if pd.Table != spec.Name || pd.Partition < 0 || !isJSONObject(pd.Value) || len(pd.Index.raw) != len(spec.Indexes) {
		return tableItem{}, errBadPeerDoc
	}
	key, err := t.ParseKey(pd.Key)
	if err != nil || len(key) == 0 || t.FormatKey(key) != pd.Key {
		return tableItem{}, errBadPeerDoc
	}
	vals := make([]engine.IndexValue, len(spec.Indexes))
	for i, ix := range spec.Indexes {
		var ok bool // a missing index is nil: not a value
		if vals[i], ok = indexValueJSON(pd.Index.raw[ix.Name], ix.Kind); !ok {
			return tableItem{}, errBadPeerDoc
		}
	}
	pd.Stale = nil // only a key's answer reports one (see peerDoc)
	it := newItem(spec, pos, key, pd, vals)
	if isMovieTable(t, spec) {
		if _, err := movieOf(it); err != nil {
			return tableItem{}, errBadPeerDoc
		}
	}
	return it, nil
}

// indexValueJSON reads an index value of kind from JSON (a valid one, never null).
func indexValueJSON(raw json.RawMessage, kind engine.IndexKind) (engine.IndexValue, bool) {
	null := bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
	if kind == engine.IndexNumber {
		var f float64
		ok := !null && json.Unmarshal(raw, &f) == nil
		return engine.Num(f), ok
	}
	var str string
	ok := !null && json.Unmarshal(raw, &str) == nil && validIndexString(str)
	return engine.Str(str), ok
}

// tableResult is a merged query page; next is the position after it (nil: last page).
type tableResult struct {
	gathered[tableItem]
	next *engine.IndexCursor
}

// gatherTable merges this instance's page with those of the instances
// owning the other partitions (see gather). Partitions whose active did not
// answer are then asked of standby copies, here and on peers (unless
// activeOnly), and reported stale; those nobody answered, missing.
func (s *Server) gatherTable(ctx context.Context, tq tableQuery, activeOnly bool) (tableResult, error) {
	local, covered, err := tq.t.QueryLocal(ctx, tq.q)
	if err != nil {
		return tableResult{}, err
	}
	mem, err := tq.t.Membership(ctx)
	if err != nil {
		return tableResult{}, err
	}
	mine, err := localItems(tq, local.Docs)
	if err != nil {
		return tableResult{}, err
	}
	g, err := gather(ctx, s.tableScatter(tq, mem, peerPage[tableItem]{items: mine, more: local.Next != nil, covered: covered}, false))
	if err != nil {
		return tableResult{}, err
	}
	if rq, ok := tq.t.(ReplicaQuerier); ok && len(g.missing) > 0 && !activeOnly {
		g = s.fillFromReplicas(ctx, tq, rq, mem, g)
	}
	res := tableResult{gathered: g}
	if g.more && len(g.items) > 0 {
		c := g.items[len(g.items)-1].cur
		res.next = &c
	}
	return res, nil
}

// tableScatter is tq scattered over mem's instances with local as this
// instance's part; replica asks the peers for their standby copies too.
func (s *Server) tableScatter(tq tableQuery, mem engine.Membership, local peerPage[tableItem], replica bool) scatter[tableItem] {
	msg := "table query: instance did not answer, its partitions are reported missing"
	if replica {
		msg = "table query: standby did not answer"
	}
	return scatter[tableItem]{mem: mem, local: local, limit: tq.q.Limit,
		ask: func(ctx context.Context, addr string) (peerPage[tableItem], error) {
			return s.tableQueryPeer(ctx, addr, tq, mem.Partitions, replica)
		},
		partition: func(it tableItem) int32 { return it.doc.Partition },
		less:      func(a, b tableItem) bool { return tq.before(a.cur, b.cur) },
		warn:      func(addr string, err error) { s.log.Warn(msg, "table", tq.spec.Name, "peer", addr, "err", err) },
	}
}

// tableQueryPeer asks one peer for tq and checks its answer: at most
// tq.q.Limit valid documents, each inside the query, after its cursor, and
// in its key's partition, one the peer says it covered.
func (s *Server) tableQueryPeer(ctx context.Context, addr string, tq tableQuery, n int32, replica bool) (peerPage[tableItem], error) {
	t, spec, q := tq.t, tq.spec, tq.q
	vals := tableQueryValues(spec.Name, tq.kind, q)
	if replica {
		vals.Set(replicaParam, "1")
	}
	code, hdr, body, err := s.tablePeerGet(ctx, addr, "/tables/"+url.PathEscape(spec.Name), vals)
	if err != nil {
		return peerPage[tableItem]{}, err
	}
	if code != http.StatusOK {
		return peerPage[tableItem]{}, fmt.Errorf("instance %s answered %d: %w", addr, code, engine.ErrUnavailable)
	}
	covered, ok := parsePartitions(hdr.Get(PartitionsHeader), n)
	if !ok {
		return peerPage[tableItem]{}, fmt.Errorf("instance %s: invalid %s header: %w", addr, PartitionsHeader, engine.ErrUnavailable)
	}
	var page peerPageJSON
	if err := decodeStrict(body, &page); err != nil || page.Table != spec.Name || page.Index != q.Index || len(page.Items) > q.Limit {
		return peerPage[tableItem]{}, fmt.Errorf("instance %s: invalid query answer: %w", addr, engine.ErrUnavailable)
	}
	in := setOf(covered)
	items := make([]tableItem, 0, len(page.Items))
	for _, pd := range page.Items {
		it, err := peerItem(t, spec, tq.pos, pd)
		if err != nil || !in[it.doc.Partition] || engine.PartitionFor(it.cur.Key, n) != it.doc.Partition ||
			!q.InRange(it.cur.Value, tq.kind) || (q.After != nil && !tq.before(*q.After, it.cur)) {
			return peerPage[tableItem]{}, fmt.Errorf("instance %s: query answer holds a document outside the query or its partitions: %w", addr, engine.ErrUnavailable)
		}
		items = append(items, it)
	}
	return peerPage[tableItem]{items: items, more: page.Next != "", covered: covered}, nil
}
