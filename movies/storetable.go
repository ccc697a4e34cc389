package movies

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/keepstate/keepstate/engine"
)

// StoreTable serves a movie engine.Store (the movie layout the stores kept
// before every job was a table) as the movie job's table. Documents are
// converted at the boundary: Doc.Value is Values' 16 bytes and Doc.Index
// the average. Query answers the avg index in descending order only; an
// ascending query is engine.ErrInvalid. The table is an
// engine.TableScanner exactly when s is an engine.PartitionScanner, and
// engine.InstanceLocal when s is. Safe for concurrent use as s is.
func StoreTable(s engine.Store) engine.Table {
	t := &storeTable{s: s}
	if sc, ok := s.(engine.PartitionScanner); ok {
		return &scanTable{storeTable: t, sc: sc}
	}
	return t
}

type storeTable struct{ s engine.Store }

var _ engine.Table = (*storeTable)(nil)

func (t *storeTable) Spec() engine.TableSpec { return Spec }

// MovieQuerier returns the movie store behind the table.
func (t *storeTable) MovieQuerier() engine.Querier { return t.s }

func (t *storeTable) Claim(ctx context.Context, p int32) (int64, error) { return t.s.Claim(ctx, p) }

func (t *storeTable) Checkpoint(ctx context.Context, p int32) (int64, bool, error) {
	return t.s.Checkpoint(ctx, p)
}

func (t *storeTable) DropPartition(ctx context.Context, p int32) error {
	return t.s.DropPartition(ctx, p)
}

// docOf converts a stored movie into its table document.
func docOf(m engine.MovieStats) engine.Doc {
	a := Agg{Count: m.Count, Sum: m.Sum}
	return engine.Doc{
		Key: Key(m.MovieID), Partition: m.Partition, Version: m.Version, Sources: m.Sources,
		Value: Values{}.Append(make([]byte, 0, 16), a), Index: []engine.IndexValue{{Num: a.Avg()}},
	}
}

// statsOf converts a table document into a stored movie.
func statsOf(d engine.Doc) (engine.MovieStats, error) {
	id, err := engine.Int64Keys.Decode(d.Key)
	if err != nil {
		return engine.MovieStats{}, err
	}
	a, err := Values{}.Decode(context.Background(), "", d.Value)
	if err != nil {
		return engine.MovieStats{}, fmt.Errorf("movie %d: %w", id, err)
	}
	return engine.MovieStats{MovieID: id, Partition: d.Partition, Count: a.Count, Sum: a.Sum, Version: d.Version, Sources: d.Sources}, nil
}

func (t *storeTable) Load(ctx context.Context, keys [][]byte) (map[string]engine.Doc, error) {
	ids := make([]int64, 0, len(keys))
	for _, k := range keys {
		id, err := engine.Int64Keys.Decode(k)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	ms, err := t.s.Load(ctx, ids)
	if err != nil {
		return nil, err
	}
	// One block for every key and value, one for the index values.
	out := make(map[string]engine.Doc, len(ms))
	buf := make([]byte, 0, 24*len(ms))
	index := make([]engine.IndexValue, len(ms))
	i := 0
	for _, m := range ms {
		a := Agg{Count: m.Count, Sum: m.Sum}
		start := len(buf)
		buf = binary.BigEndian.AppendUint64(buf, uint64(m.MovieID))
		key := buf[start:len(buf):len(buf)]
		buf = Values{}.Append(buf, a)
		index[i] = engine.IndexValue{Num: a.Avg()}
		out[string(key)] = engine.Doc{Key: key, Partition: m.Partition, Version: m.Version, Sources: m.Sources,
			Value: buf[start+8 : len(buf) : len(buf)], Index: index[i : i+1 : i+1]}
		i++
	}
	return out, nil
}

func (t *storeTable) Apply(ctx context.Context, b engine.DocBatch) error {
	docs := make([]engine.MovieStats, len(b.Docs))
	for i, d := range b.Docs {
		m, err := statsOf(d)
		if err != nil {
			return err
		}
		docs[i] = m
	}
	return t.s.Apply(ctx, engine.Batch{Partition: b.Partition, Epoch: b.Epoch, Docs: docs, Checkpoint: b.Checkpoint, Replay: b.Replay})
}

func (t *storeTable) Get(ctx context.Context, key []byte) (engine.Doc, error) {
	id, err := engine.Int64Keys.Decode(key)
	if err != nil {
		return engine.Doc{}, err
	}
	m, err := t.s.Get(ctx, id)
	if err != nil {
		return engine.Doc{}, err
	}
	return docOf(m), nil
}

func (t *storeTable) Query(ctx context.Context, q engine.IndexQuery) (engine.DocPage, error) {
	if _, _, err := q.Validate(Spec); err != nil {
		return engine.DocPage{}, err
	}
	if !q.Desc {
		return engine.DocPage{}, fmt.Errorf("the movies table orders avg descending only: %w", engine.ErrInvalid)
	}
	rq := engine.RangeQuery{MinAvg: math.Inf(-1), MaxAvg: math.Inf(1), Limit: q.Limit}
	if q.HasMin {
		rq.MinAvg = q.Min.Num
	}
	if q.HasMax {
		rq.MaxAvg = q.Max.Num
	}
	if q.After != nil {
		id, err := engine.Int64Keys.Decode(q.After.Key)
		if err != nil {
			return engine.DocPage{}, err
		}
		rq.After = &engine.Cursor{Avg: q.After.Value.Num, MovieID: id}
	}
	page, err := t.s.Range(ctx, rq)
	if err != nil {
		return engine.DocPage{}, err
	}
	out := engine.DocPage{Docs: make([]engine.Doc, len(page.Movies))}
	for i, m := range page.Movies {
		out.Docs[i] = docOf(m)
	}
	if page.Next != nil {
		out.Next = &engine.IndexCursor{Value: engine.Num(page.Next.Avg), Key: Key(page.Next.MovieID)}
	}
	return out, nil
}

// InstanceLocal reports whether the movie store is local to this instance.
func (t *storeTable) InstanceLocal() bool {
	l, ok := t.s.(engine.InstanceLocal)
	return ok && l.InstanceLocal()
}

// scanTable is a storeTable whose store lists partitions.
type scanTable struct {
	*storeTable
	sc engine.PartitionScanner
}

// ScanPartition lists partition p of the movie store.
func (t *scanTable) ScanPartition(ctx context.Context, p int32, fn func(engine.Doc) error) error {
	return t.sc.ScanPartition(ctx, p, func(m engine.MovieStats) error { return fn(docOf(m)) })
}
