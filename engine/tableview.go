package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// TableView is an engine's table as its queries see it, with the
// instance's ownership applied: on an InstanceLocal store only partitions
// RUNNING here are answered and other keys are routed to their owner; a
// shared store (Redis) answers everything everywhere. Safe for concurrent
// use.
type TableView struct {
	e *Engine
}

// View returns the engine's TableView.
func (e *Engine) View() *TableView { return &TableView{e: e} }

// Spec returns the job's table spec.
func (v *TableView) Spec() TableSpec { return v.e.table.Spec() }

// KeyKind names the job's key type ("int64", "string").
func (v *TableView) KeyKind() string { return v.e.job.KeyKind() }

// ParseKey reads a key as written in a URL (ErrInvalid).
func (v *TableView) ParseKey(s string) ([]byte, error) { return v.e.job.ParseKey(s) }

// FormatKey writes a record key for URLs and JSON.
func (v *TableView) FormatKey(key []byte) string { return v.e.job.FormatKey(key) }

// ValueJSON renders d's aggregate as JSON (the job's aggregate type through
// encoding/json).
func (v *TableView) ValueJSON(d Doc) (json.RawMessage, error) {
	return v.e.job.ValueJSON(context.Background(), d.Value)
}

// Shared reports whether every instance shares the store (no routing).
func (v *TableView) Shared() bool { return !v.e.localStore }

// Owner returns where key is answered (see Router.Owner); on a shared store
// always here.
func (v *TableView) Owner(ctx context.Context, key []byte) (addr string, local bool, err error) {
	if v.Shared() {
		return v.e.route.self, true, nil
	}
	return v.e.route.OwnerOf(ctx, key)
}

// Membership returns which instance owns each partition of the job.
func (v *TableView) Membership(ctx context.Context) (Membership, error) {
	return v.e.route.Membership(ctx)
}

// Get returns the document of key: ErrNotFound when there is none, and on
// a local store ErrUnavailable unless its partition is RUNNING here.
func (v *TableView) Get(ctx context.Context, key []byte) (Doc, error) {
	if v.Shared() {
		return v.e.table.Get(ctx, key)
	}
	r := v.e.route
	p, err := r.partitionOf(key)
	if err != nil {
		return Doc{}, err
	}
	if !r.answerable(p) {
		return Doc{}, fmt.Errorf("partition %d is not running on this instance: %w", p, ErrUnavailable)
	}
	d, err := v.e.table.Get(ctx, key)
	if err != nil {
		return d, err
	}
	if !r.answerable(p) {
		return Doc{}, fmt.Errorf("partition %d stopped running on this instance: %w", p, ErrUnavailable)
	}
	return d, nil
}

// QueryLocal answers q and returns the partitions the page covers
// (sorted): on a local store the partitions RUNNING here, paging through
// the index until q.Limit documents of them are found; on a shared store
// every partition.
func (v *TableView) QueryLocal(ctx context.Context, q IndexQuery) (DocPage, []int32, error) {
	spec := v.e.table.Spec()
	if _, _, err := q.Validate(spec); err != nil {
		return DocPage{}, nil, err
	}
	r := v.e.route
	if v.Shared() {
		page, err := v.e.table.Query(ctx, q)
		if err != nil {
			return DocPage{}, nil, err
		}
		all := make([]int32, r.numParts.Load())
		for i := range all {
			all[i] = int32(i)
		}
		return page, all, nil
	}
	return v.queryParts(ctx, q, r.answerableSet)
}

// QueryReplicas answers q from every partition this instance can answer
// at all (caught-up standbys, unconfirmed own copies, see GetReplica, and
// what QueryLocal answers) and returns the partitions the page covers
// (sorted), for partitions whose active did not answer a scattered query.
// A shared store has no standbys: it covers none.
func (v *TableView) QueryReplicas(ctx context.Context, q IndexQuery) (DocPage, []int32, error) {
	if _, _, err := q.Validate(v.e.table.Spec()); err != nil {
		return DocPage{}, nil, err
	}
	if v.Shared() {
		return DocPage{}, nil, nil
	}
	return v.queryParts(ctx, q, func() map[int32]bool {
		set := v.e.replicaSet()
		for p := range v.e.route.answerableSet() {
			set[p] = true
		}
		return set
	})
}

// queryParts answers q with the documents of the partitions in parts():
// a FilteredQuerier skips the others inside its walk; any other store is
// paged through until q.Limit documents of them are found. Partitions
// that left parts() meanwhile are taken out of the answer.
func (v *TableView) queryParts(ctx context.Context, q IndexQuery, parts func() map[int32]bool) (DocPage, []int32, error) {
	running := parts()
	var out DocPage
	if len(running) == 0 {
		return out, []int32{}, nil
	}
	var err error
	if fq, ok := v.e.table.(FilteredQuerier); ok {
		n := v.e.route.numParts.Load()
		out, err = fq.QueryFiltered(ctx, q, func(key []byte) bool { return running[PartitionFor(key, n)] })
	} else {
		err = v.pageParts(ctx, q, running, &out)
	}
	if err != nil {
		return DocPage{}, nil, err
	}
	var covered []int32
	out.Docs, covered = stillCovered(running, parts(), out.Docs, func(d Doc) int32 { return d.Partition })
	return out, covered, nil
}

// pageParts pages through the index into out until q.Limit documents of
// the partitions in running are found.
func (v *TableView) pageParts(ctx context.Context, q IndexQuery, running map[int32]bool, out *DocPage) error {
	spec := v.e.table.Spec()
	inner := q
	for done := false; !done; {
		page, err := v.e.table.Query(ctx, inner)
		if err != nil {
			return err
		}
		for _, d := range page.Docs {
			if !running[d.Partition] {
				continue
			}
			out.Docs = append(out.Docs, d)
			if len(out.Docs) == q.Limit {
				pos, _, _ := q.Validate(spec)
				out.Next = &IndexCursor{Value: d.Index[pos], Key: d.Key}
				done = true
				break
			}
		}
		if page.Next == nil {
			break
		}
		inner.After = page.Next
	}
	return nil
}

// replicaSet returns the partitions whose standby copy here may answer.
func (e *Engine) replicaSet() map[int32]bool {
	out := map[int32]bool{}
	for p := range e.route.numParts.Load() {
		if _, ok := e.replicaStaleness(p); ok {
			out[p] = true
		}
	}
	return out
}

// stillCovered returns the partitions of running still in now, sorted, and
// the items whose partition (part) is one of them.
func stillCovered[T any](running, now map[int32]bool, items []T, part func(T) int32) ([]T, []int32) {
	covered := make([]int32, 0, len(running))
	for p := range running {
		if now[p] {
			covered = append(covered, p)
		}
	}
	if len(covered) < len(running) {
		kept := items[:0]
		for _, it := range items {
			if now[part(it)] {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	slices.Sort(covered)
	return items, covered
}

// Staleness says how far a replica's answer may be behind its active.
type Staleness struct {
	// Records is how many changelog offsets the replica was behind at its
	// last read (transaction markers count).
	Records int64
	// Age is how long ago that read ended.
	Age time.Duration
	// Unconfirmed marks this instance's own copy of a partition it runs,
	// answering while its read lease has lapsed; Records is then 0 and Age
	// counts from when the lease ran out. A caught-up standby elsewhere is
	// usually fresher: ask it first.
	Unconfirmed bool
}

// GetReplica returns the document of key from this instance's standby
// copy of its partition (see standby.go) and how stale that copy is, for
// a key whose active cannot answer. It returns ErrUnavailable when there
// is no standby here, or one not yet read or behind by more than
// Config.AcceptableLag; ErrNotFound, with the staleness, when the copy has
// no such document. This instance's own copy of a partition it runs
// answers too while its read lease has lapsed (Staleness.Unconfirmed).
func (v *TableView) GetReplica(ctx context.Context, key []byte) (Doc, Staleness, error) {
	e := v.e
	p, err := e.route.partitionOf(key)
	if err != nil {
		return Doc{}, Staleness{}, err
	}
	st, ok := e.replicaStaleness(p)
	if !ok {
		return Doc{}, Staleness{}, fmt.Errorf("no caught-up standby of partition %d on this instance: %w", p, ErrUnavailable)
	}
	d, err := e.table.Get(ctx, key)
	if err != nil {
		return Doc{}, st, err
	}
	if _, ok := e.replicaStaleness(p); !ok {
		return Doc{}, Staleness{}, fmt.Errorf("standby of partition %d stopped on this instance: %w", p, ErrUnavailable)
	}
	return d, st, nil
}

// ReplicaStaleness returns how stale this instance's copy of partition p
// is when it answers as a replica (see GetReplica); ok is false when it
// has none that may. Safe for concurrent use.
func (v *TableView) ReplicaStaleness(p int32) (st Staleness, ok bool) {
	return v.e.replicaStaleness(p)
}

// replicaStaleness returns the staleness of this instance's standby of p;
// ok is false when there is none that may answer.
func (e *Engine) replicaStaleness(p int32) (Staleness, bool) {
	if age, ok := e.route.unconfirmed(p); ok {
		return Staleness{Age: age, Unconfirmed: true}, true
	}
	r := e.standby.get(p)
	if r == nil {
		// A standby promoted to active, or a copy within the acceptable
		// lag that is restoring, answers as a standby until it runs.
		if r = e.standby.promotedTo(p); r == nil {
			return Staleness{}, false
		}
		if st, ok := e.route.partitionState(p); !ok || st != Restoring {
			return Staleness{}, false
		}
	}
	records, age, ok := r.lag(monoNow())
	if !ok || records > e.cfg.AcceptableLag {
		return Staleness{}, false
	}
	return Staleness{Records: records, Age: age}, true
}
