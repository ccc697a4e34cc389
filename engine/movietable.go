package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
)

// MovieSpec is the movie table's spec: one number index, avg, ordered
// descending with ties by movie id ascending (the order of Store.Range).
var MovieSpec = TableSpec{Name: "movies", Indexes: []IndexSpec{{Name: "avg", Kind: IndexNumber}}, TiesAscending: true}

// MovieTable serves a movie Store as the movie job's Table. The movie
// stores keep their own layout (count, sum and average fields and a rank
// index on the average), which predates tables: existing data directories
// and Redis databases are used as they are, without a migration. Documents
// are converted at the boundary: Doc.Value is MovieJob's 16-byte value and
// Doc.Index the average. Query answers the avg index in descending order
// only (Store.Range's order); an ascending query is ErrInvalid. The
// returned table has the optional abilities (PartitionScanner, Resetter,
// InstanceLocal) that s has. Safe for concurrent use as s is.
func MovieTable(s Store) Table { return &movieTable{s: s} }

type movieTable struct{ s Store }

var _ Table = (*movieTable)(nil)

func (t *movieTable) Spec() TableSpec { return MovieSpec }

func (t *movieTable) Claim(ctx context.Context, p int32) (int64, error) { return t.s.Claim(ctx, p) }

func (t *movieTable) Checkpoint(ctx context.Context, p int32) (int64, bool, error) {
	return t.s.Checkpoint(ctx, p)
}

func (t *movieTable) DropPartition(ctx context.Context, p int32) error {
	return t.s.DropPartition(ctx, p)
}

// movieDoc converts a stored movie into its table document.
func movieDoc(m MovieStats) Doc {
	a := MovieAgg{Count: m.Count, Sum: m.Sum}
	return Doc{
		Key: EncodeMovieKey(m.MovieID), Partition: m.Partition, Version: m.Version, Sources: m.Sources,
		Value: appendMovieValue(make([]byte, 0, 16), a), Index: []IndexValue{{Num: a.Avg()}},
	}
}

// movieStats converts a table document into a stored movie.
func movieStats(d Doc) (MovieStats, error) {
	id, err := DecodeMovieKey(d.Key)
	if err != nil {
		return MovieStats{}, err
	}
	a, err := movieValues{}.Decode(context.Background(), "", d.Value)
	if err != nil {
		return MovieStats{}, fmt.Errorf("movie %d: %w", id, err)
	}
	return MovieStats{MovieID: id, Partition: d.Partition, Count: a.Count, Sum: a.Sum, Version: d.Version, Sources: d.Sources}, nil
}

func (t *movieTable) Load(ctx context.Context, keys [][]byte) (map[string]Doc, error) {
	ids := make([]int64, 0, len(keys))
	for _, k := range keys {
		id, err := DecodeMovieKey(k)
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
	out := make(map[string]Doc, len(ms))
	buf := make([]byte, 0, 24*len(ms))
	index := make([]IndexValue, len(ms))
	i := 0
	for _, m := range ms {
		a := MovieAgg{Count: m.Count, Sum: m.Sum}
		start := len(buf)
		buf = binary.BigEndian.AppendUint64(buf, uint64(m.MovieID))
		key := buf[start:len(buf):len(buf)]
		buf = appendMovieValue(buf, a)
		index[i] = IndexValue{Num: a.Avg()}
		out[string(key)] = Doc{Key: key, Partition: m.Partition, Version: m.Version, Sources: m.Sources,
			Value: buf[start+8 : len(buf) : len(buf)], Index: index[i : i+1 : i+1]}
		i++
	}
	return out, nil
}

func (t *movieTable) Apply(ctx context.Context, b DocBatch) error {
	docs := make([]MovieStats, len(b.Docs))
	for i, d := range b.Docs {
		m, err := movieStats(d)
		if err != nil {
			return err
		}
		docs[i] = m
	}
	return t.s.Apply(ctx, Batch{Partition: b.Partition, Epoch: b.Epoch, Docs: docs, Checkpoint: b.Checkpoint, Replay: b.Replay})
}

func (t *movieTable) Get(ctx context.Context, key []byte) (Doc, error) {
	id, err := DecodeMovieKey(key)
	if err != nil {
		return Doc{}, err
	}
	m, err := t.s.Get(ctx, id)
	if err != nil {
		return Doc{}, err
	}
	return movieDoc(m), nil
}

func (t *movieTable) Query(ctx context.Context, q IndexQuery) (DocPage, error) {
	if _, _, err := q.Validate(MovieSpec); err != nil {
		return DocPage{}, err
	}
	if !q.Desc {
		return DocPage{}, fmt.Errorf("the movies table orders avg descending only: %w", ErrInvalid)
	}
	rq := RangeQuery{MinAvg: math.Inf(-1), MaxAvg: math.Inf(1), Limit: q.Limit}
	if q.HasMin {
		rq.MinAvg = q.Min.Num
	}
	if q.HasMax {
		rq.MaxAvg = q.Max.Num
	}
	if q.After != nil {
		id, err := DecodeMovieKey(q.After.Key)
		if err != nil {
			return DocPage{}, err
		}
		rq.After = &Cursor{Avg: q.After.Value.Num, MovieID: id}
	}
	page, err := t.s.Range(ctx, rq)
	if err != nil {
		return DocPage{}, err
	}
	out := DocPage{Docs: make([]Doc, len(page.Movies))}
	for i, m := range page.Movies {
		out.Docs[i] = movieDoc(m)
	}
	if page.Next != nil {
		out.Next = &IndexCursor{Value: Num(page.Next.Avg), Key: EncodeMovieKey(page.Next.MovieID)}
	}
	return out, nil
}

// ScanPartition lists partition p when the movie store can (see
// PartitionScanner).
func (t *movieTable) ScanPartition(ctx context.Context, p int32, fn func(Doc) error) error {
	sc, ok := t.s.(PartitionScanner)
	if !ok {
		return fmt.Errorf("movie store cannot list partition %d: %w", p, ErrInvalid)
	}
	return sc.ScanPartition(ctx, p, func(m MovieStats) error { return fn(movieDoc(m)) })
}

// InstanceLocal reports whether the movie store is local to this instance.
func (t *movieTable) InstanceLocal() bool {
	l, ok := t.s.(InstanceLocal)
	return ok && l.InstanceLocal()
}

// canScan reports whether ScanPartition works.
func (t *movieTable) canScan() bool { _, ok := t.s.(PartitionScanner); return ok }
