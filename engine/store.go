package engine

import (
	"context"
	"errors"
	"math"
)

// Sentinel errors returned by stores and the engine. Check them with errors.Is.
var (
	// ErrNotFound means the requested movie has no aggregate in the store.
	ErrNotFound = errors.New("not found")
	// ErrFenced means a write was refused because another owner has claimed
	// the partition (a newer epoch) or already wrote a newer version of a
	// document. The writer must drop its cached state for the partition.
	ErrFenced = errors.New("fenced: partition owned by another writer")
	// ErrInvalid means a document or query is malformed (for example a NaN
	// sum, a zero count, or a negative limit). Nothing was written.
	ErrInvalid = errors.New("invalid")
	// ErrUnavailable means the store cannot be reached right now; the caller
	// may retry later. Stores wrap their transport errors with it.
	ErrUnavailable = errors.New("store unavailable")
	// ErrCorrupt means the store's data failed an integrity check (a
	// damaged disk or a bad copy): nothing it holds can be trusted, and a
	// retry reads the same damage. The engine does not restart its group
	// session on it: Run stops and returns the error, and whoever runs the
	// engine rebuilds the store from the changelog (see docstore) or stops.
	ErrCorrupt = errors.New("store corrupt")
)

// MovieStats is the aggregate of one movie: the count and sum of its ratings,
// plus the processing metadata that makes re-application of a record a no-op.
type MovieStats struct {
	// MovieID is the movie's id (the repartition key).
	MovieID int64
	// Partition is the repartition/changelog partition that owns the movie.
	Partition int32
	// Count is the number of ratings applied.
	Count int64
	// Sum is the sum of the ratings applied.
	Sum float64
	// Version is the repartition-topic offset of the last record applied.
	Version int64
	// Sources maps each input partition to the offset of the last record
	// applied from it.
	Sources map[int32]int64
}

// Avg returns Sum/Count, or 0 for an empty aggregate.
func (m MovieStats) Avg() float64 {
	if m.Count == 0 {
		return 0
	}
	return m.Sum / float64(m.Count)
}

// Validate reports (wrapping ErrInvalid) whether m may be stored: a positive
// count and a finite sum.
func (m MovieStats) Validate() error {
	switch {
	case m.Count <= 0:
		return &fieldError{movie: m.MovieID, msg: "count must be positive"}
	case math.IsNaN(m.Sum) || math.IsInf(m.Sum, 0):
		return &fieldError{movie: m.MovieID, msg: "sum must be finite"}
	}
	return nil
}

// Clone returns a deep copy of m (Sources is copied).
func (m MovieStats) Clone() MovieStats {
	c := m
	if m.Sources != nil {
		c.Sources = make(map[int32]int64, len(m.Sources))
		for k, v := range m.Sources {
			c.Sources[k] = v
		}
	}
	return c
}

type fieldError struct {
	movie int64
	msg   string
}

func (e *fieldError) Error() string {
	if e.movie == 0 {
		return "invalid query: " + e.msg
	}
	return "invalid movie " + itoa(e.movie) + ": " + e.msg
}
func (e *fieldError) Unwrap() error { return ErrInvalid }

// Batch is one atomic write of a partition: the documents changed by a
// commit interval and the changelog checkpoint that covers them.
type Batch struct {
	// Partition is the repartition/changelog partition written.
	Partition int32
	// Epoch is the writer's fencing token from Store.Claim. A store refuses
	// the whole batch with ErrFenced when a newer epoch has been claimed.
	Epoch int64
	// Docs are the new versions of the changed documents.
	Docs []MovieStats
	// Checkpoint is the next changelog offset to read for this partition:
	// every changelog record below it is reflected in the store.
	Checkpoint int64
	// Replay marks a batch restored from the changelog: documents whose
	// version is not newer than the stored one are skipped instead of
	// refusing the batch.
	Replay bool
}

// Store keeps the aggregates and per-partition checkpoints. Implementations
// must be safe for concurrent use by multiple goroutines; readers never see a
// partly applied batch.
type Store interface {
	// Claim makes the caller the writer of partition p and returns its new
	// epoch, which is greater than every epoch claimed before for p.
	Claim(ctx context.Context, p int32) (epoch int64, err error)
	// Checkpoint returns the next changelog offset to read for partition p;
	// ok is false when the store holds no checkpoint for p.
	Checkpoint(ctx context.Context, p int32) (next int64, ok bool, err error)
	// Load returns the stored documents for ids; ids without a document are
	// absent from the map (not an error).
	Load(ctx context.Context, ids []int64) (map[int64]MovieStats, error)
	// Apply writes b atomically: all documents and the checkpoint, or
	// nothing. It returns ErrFenced if b.Epoch is not the partition's
	// current claimed epoch (older: another writer claimed it since; newer
	// or no claim at all: the store lost its state since the claim), or
	// (unless b.Replay) if any document's Version is not newer than the
	// stored one; ErrInvalid if a document fails Validate. A batch without
	// documents only moves the checkpoint and confirms the claim. Every
	// later read sees an applied batch. A live batch is durable when Apply
	// returns; a replay batch may be held in memory and made durable with
	// later ones (a bulk load), so a crash may undo replay batches together
	// with their checkpoint, and the next restore repeats them.
	Apply(ctx context.Context, b Batch) error
	// DropPartition deletes every document and the checkpoint of partition
	// p, so the next owner restores it from the whole changelog.
	DropPartition(ctx context.Context, p int32) error
	// Close releases the store. It is not safe to call concurrently with
	// other methods.
	Close() error
	Querier
}

// Querier is the read side of a movie store, through which MovieTable
// answers the movie table's lookups and queries.
type Querier interface {
	// Get returns the aggregate of one movie, or ErrNotFound.
	Get(ctx context.Context, movieID int64) (MovieStats, error)
	// Range returns movies with MinAvg <= avg <= MaxAvg, sorted by average
	// descending then movie id ascending, at most q.Limit of them, starting
	// after q.After. Page.Next is set when more may follow.
	Range(ctx context.Context, q RangeQuery) (Page, error)
}

// RangeQuery selects movies by average rating.
type RangeQuery struct {
	// MinAvg is the inclusive lower bound of the average.
	MinAvg float64
	// MaxAvg is the inclusive upper bound; use math.Inf(1) for none.
	MaxAvg float64
	// Limit is the page size (> 0).
	Limit int
	// After, when set, continues a previous page: only movies sorting
	// strictly after it are returned.
	After *Cursor
}

// Cursor is a position in the (avg desc, movie id asc) order.
type Cursor struct {
	Avg     float64
	MovieID int64
}

// Page is one page of a range query.
type Page struct {
	// Movies are sorted by average descending then movie id ascending.
	Movies []MovieStats
	// Next is the cursor of the last movie when the page is full, else nil.
	Next *Cursor
}

// Before reports whether a sorts before b in the range order (avg desc, id asc).
func (a Cursor) Before(b Cursor) bool {
	if a.Avg != b.Avg {
		return a.Avg > b.Avg
	}
	return a.MovieID < b.MovieID
}

// Validate checks q (wrapping ErrInvalid).
func (q RangeQuery) Validate() error {
	if q.Limit <= 0 {
		return &fieldError{msg: "limit must be positive"}
	}
	if math.IsNaN(q.MinAvg) || math.IsNaN(q.MaxAvg) {
		return &fieldError{msg: "bounds must be numbers"}
	}
	return nil
}

// PartitionScanner is an optional ability of a store: iterating over every
// document of one partition (used to re-seed a lost changelog).
type PartitionScanner interface {
	// ScanPartition calls fn for each document of partition p in
	// unspecified order, stopping at the first error fn returns.
	ScanPartition(ctx context.Context, p int32, fn func(MovieStats) error) error
}

// Resetter is an optional ability of a store: deleting the movie job's
// state.
type Resetter interface {
	// Reset deletes every movie document and checkpoint. It keeps the
	// partitions' epochs (or raises them), so that a claim after the reset
	// returns an epoch above any claimed before: an old writer that is
	// still alive stays fenced. Tables the store holds (Tables) are left
	// alone: each resets on its own (TableResetter).
	Reset(ctx context.Context) error
}
