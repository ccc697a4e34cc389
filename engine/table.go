package engine

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"strings"
	"unicode/utf8"
)

// IndexKind is the type of a declared secondary index's values.
type IndexKind uint8

const (
	// IndexNumber indexes float64 values (finite; integers up to 2^53 are
	// exact). Order is numeric.
	IndexNumber IndexKind = 1
	// IndexString indexes UTF-8 strings without a 0x00 byte. Order is
	// byte-wise (Go's string comparison).
	IndexString IndexKind = 2
)

// String returns "number" or "string".
func (k IndexKind) String() string {
	switch k {
	case IndexNumber:
		return "number"
	case IndexString:
		return "string"
	}
	return fmt.Sprintf("IndexKind(%d)", uint8(k))
}

// IndexSpec declares one secondary index of a table.
type IndexSpec struct {
	// Name is the index's name in queries ([a-z][a-z0-9_]{0,31}).
	Name string
	// Kind is the type of its values.
	Kind IndexKind
}

// MaxIndexes bounds the declared indexes of one table.
const MaxIndexes = 8

// MaxKeyBytes bounds a document key.
const MaxKeyBytes = 1024

// MaxIndexStringBytes bounds one string index value.
const MaxIndexStringBytes = 512

// TableSpec describes one table: the state of one job. A store keeps each
// table apart, with its own documents, index entries, epochs and
// checkpoints.
type TableSpec struct {
	// Name is the table's name ([a-z][a-z0-9_-]{0,63}); it names the
	// job's internal topics and its HTTP routes too.
	Name string
	// Indexes are the declared secondary indexes, in the order of
	// Doc.Index.
	Indexes []IndexSpec
	// TiesAscending, when set, orders documents with equal index values by
	// key ascending in descending queries too (a leaderboard's order:
	// highest value first, ties by key). By default a descending query is
	// the exact reverse of an ascending one.
	TiesAscending bool
	// Partitions is the number of partitions the table's documents are
	// spread over (Doc.Partition is PartitionFor(Key, Partitions)); 0 when
	// unknown. A store that keeps a partition's keys together needs it: it
	// refuses a table without it and a document of another partition
	// (ErrInvalid). Reopening a table with another count is no conflict.
	Partitions int32
}

// Validate checks the spec (wrapping ErrInvalid).
func (s TableSpec) Validate() error {
	if !validName(s.Name, 64, true) {
		return fmt.Errorf("table name %q: want [a-z][a-z0-9_-]{0,63}: %w", s.Name, ErrInvalid)
	}
	if s.Partitions < 0 {
		return fmt.Errorf("table %s: %d partitions: %w", s.Name, s.Partitions, ErrInvalid)
	}
	if len(s.Indexes) > MaxIndexes {
		return fmt.Errorf("table %s: %d indexes, at most %d: %w", s.Name, len(s.Indexes), MaxIndexes, ErrInvalid)
	}
	seen := map[string]bool{}
	for _, ix := range s.Indexes {
		if !validName(ix.Name, 32, false) {
			return fmt.Errorf("table %s: index name %q: want [a-z][a-z0-9_]{0,31}: %w", s.Name, ix.Name, ErrInvalid)
		}
		if ix.Kind != IndexNumber && ix.Kind != IndexString {
			return fmt.Errorf("table %s: index %s: unknown kind %d: %w", s.Name, ix.Name, ix.Kind, ErrInvalid)
		}
		if seen[ix.Name] {
			return fmt.Errorf("table %s: index %s declared twice: %w", s.Name, ix.Name, ErrInvalid)
		}
		seen[ix.Name] = true
	}
	return nil
}

// Index returns the position and spec of the index called name; ok is
// false when the table declares no such index.
func (s TableSpec) Index(name string) (pos int, spec IndexSpec, ok bool) {
	for i, ix := range s.Indexes {
		if ix.Name == name {
			return i, ix, true
		}
	}
	return -1, IndexSpec{}, false
}

func validName(s string, max int, dash bool) bool {
	if len(s) == 0 || len(s) > max || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	return !strings.ContainsFunc(s[1:], func(c rune) bool {
		return (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && (!dash || c != '-')
	})
}

// IndexValue is one value of a declared index: Num for IndexNumber, Str for
// IndexString (the other field is zero).
type IndexValue struct {
	Num float64
	Str string
}

// Num returns the IndexValue of a number.
func Num(v float64) IndexValue { return IndexValue{Num: v} }

// Str returns the IndexValue of a string.
func Str(v string) IndexValue { return IndexValue{Str: v} }

// compare orders a and b as values of kind k: -1, 0 or +1.
func (a IndexValue) compare(b IndexValue, k IndexKind) int {
	if k == IndexString {
		return strings.Compare(a.Str, b.Str)
	}
	switch {
	case a.Num < b.Num:
		return -1
	case a.Num > b.Num:
		return 1
	}
	return 0
}

func (a IndexValue) validate(k IndexKind) error {
	if k == IndexNumber {
		if math.IsNaN(a.Num) || math.IsInf(a.Num, 0) {
			return fmt.Errorf("number index value %v is not finite: %w", a.Num, ErrInvalid)
		}
		return nil
	}
	if len(a.Str) > MaxIndexStringBytes || !utf8.ValidString(a.Str) || strings.IndexByte(a.Str, 0) >= 0 {
		return fmt.Errorf("string index value must be UTF-8 without NUL, at most %d bytes: %w", MaxIndexStringBytes, ErrInvalid)
	}
	return nil
}

// Doc is one stored aggregate of a table: the job's encoding of the
// aggregate (opaque to stores), the processing metadata that makes
// re-applying a record a no-op, and its declared index values.
type Doc struct {
	// Key is the aggregate's key as the job's key codec encodes it (the
	// repartition and changelog record key).
	Key []byte
	// Partition is the repartition/changelog partition that owns Key.
	Partition int32
	// Version is the repartition-topic offset of the last record applied.
	Version int64
	// Sources maps each input partition to the offset of the last record
	// applied from it.
	Sources map[int32]int64
	// Value is the job's encoding of the aggregate. Stores keep it as is.
	Value []byte
	// Index holds the values of the table's declared indexes, in the
	// order of TableSpec.Indexes.
	Index []IndexValue
}

// Validate reports (wrapping ErrInvalid) whether d may be stored in a
// table of spec s.
func (d Doc) Validate(s TableSpec) error {
	if len(d.Key) == 0 || len(d.Key) > MaxKeyBytes {
		return fmt.Errorf("table %s: key of %d bytes (want 1..%d): %w", s.Name, len(d.Key), MaxKeyBytes, ErrInvalid)
	}
	if d.Partition < 0 {
		return fmt.Errorf("table %s: negative partition: %w", s.Name, ErrInvalid)
	}
	if len(d.Index) != len(s.Indexes) {
		return fmt.Errorf("table %s: %d index values for %d indexes: %w", s.Name, len(d.Index), len(s.Indexes), ErrInvalid)
	}
	for i, ix := range s.Indexes {
		if err := d.Index[i].validate(ix.Kind); err != nil {
			return fmt.Errorf("table %s: index %s: %w", s.Name, ix.Name, err)
		}
	}
	return nil
}

// Clone returns a deep copy of d.
func (d Doc) Clone() Doc {
	c := d
	c.Key = bytes.Clone(d.Key)
	c.Value = bytes.Clone(d.Value)
	if d.Index != nil {
		c.Index = append([]IndexValue(nil), d.Index...)
	}
	c.Sources = maps.Clone(d.Sources)
	return c
}

// DocBatch is one atomic write of a table's partition: the documents
// changed by a commit interval and the changelog checkpoint that covers
// them.
type DocBatch struct {
	// Partition is the repartition/changelog partition written.
	Partition int32
	// Epoch is the writer's fencing token from Table.Claim.
	Epoch int64
	// Docs are the new versions of the changed documents.
	Docs []Doc
	// Checkpoint is the next changelog offset to read for this partition.
	Checkpoint int64
	// Replay marks a batch restored from the changelog: documents whose
	// version is not newer than the stored one are skipped instead of
	// refusing the batch.
	Replay bool
}

// IndexCursor is a position in an index order: the index value and key of
// the last document of a page.
type IndexCursor struct {
	Value IndexValue
	Key   []byte
}

// IndexQuery selects a table's documents by one declared index: those with
// Min <= value <= Max (each bound only when set), in index order, at most
// Limit of them, starting after After. Equality is Min = Max.
type IndexQuery struct {
	// Index is the declared index's name.
	Index string
	// Min and Max are the inclusive bounds, used when HasMin / HasMax.
	Min, Max       IndexValue
	HasMin, HasMax bool
	// Desc orders by index value descending. Ties are ordered by key:
	// ascending for an ascending query; for a descending one, descending
	// (the exact reverse) unless the table's spec sets TiesAscending.
	Desc bool
	// Limit is the page size (> 0).
	Limit int
	// After, when set, continues a previous page: only documents sorting
	// strictly after it are returned.
	After *IndexCursor
}

// Validate checks q against spec (wrapping ErrInvalid) and returns the
// position and kind of its index.
func (q IndexQuery) Validate(s TableSpec) (pos int, kind IndexKind, err error) {
	pos, ix, ok := s.Index(q.Index)
	if !ok {
		return -1, 0, fmt.Errorf("table %s has no index %q: %w", s.Name, q.Index, ErrInvalid)
	}
	if q.Limit <= 0 {
		return -1, 0, fmt.Errorf("limit must be positive: %w", ErrInvalid)
	}
	if ix.Kind == IndexNumber && (q.HasMin && math.IsNaN(q.Min.Num) || q.HasMax && math.IsNaN(q.Max.Num)) {
		return -1, 0, fmt.Errorf("index %s: bounds must be numbers: %w", ix.Name, ErrInvalid)
	}
	if q.After != nil && ix.Kind == IndexNumber && math.IsNaN(q.After.Value.Num) {
		return -1, 0, fmt.Errorf("index %s: cursor must be a number: %w", ix.Name, ErrInvalid)
	}
	return pos, ix.Kind, nil
}

// Before reports whether a sorts strictly before b in the order of q on a
// table of spec s (kind is the index's kind).
func (s TableSpec) Before(a, b IndexCursor, kind IndexKind, desc bool) bool {
	c := a.Value.compare(b.Value, kind)
	if desc {
		c = -c
	}
	if c != 0 {
		return c < 0
	}
	k := bytes.Compare(a.Key, b.Key)
	if desc && !s.TiesAscending {
		k = -k
	}
	return k < 0
}

// DocOrder returns the comparison (for slices.SortFunc) that orders
// documents by their index at pos as Before orders their cursors.
func (s TableSpec) DocOrder(pos int, kind IndexKind, desc bool) func(a, b Doc) int {
	return func(a, b Doc) int {
		ca := IndexCursor{Value: a.Index[pos], Key: a.Key}
		cb := IndexCursor{Value: b.Index[pos], Key: b.Key}
		switch {
		case s.Before(ca, cb, kind, desc):
			return -1
		case s.Before(cb, ca, kind, desc):
			return 1
		}
		return 0
	}
}

// InRange reports whether v lies within q's bounds.
func (q IndexQuery) InRange(v IndexValue, kind IndexKind) bool {
	if q.HasMin && v.compare(q.Min, kind) < 0 {
		return false
	}
	if q.HasMax && v.compare(q.Max, kind) > 0 {
		return false
	}
	return true
}

// DocPage is one page of an index query.
type DocPage struct {
	// Docs are in the query's order.
	Docs []Doc
	// Next is the cursor of the last document when the page is full, else
	// nil.
	Next *IndexCursor
}

// Table keeps one job's aggregates and per-partition checkpoints: the
// engine's protocol (Claim, Checkpoint, Load, Apply, DropPartition) on
// opaque documents, plus key lookups and index queries. Every store
// implements it and runs engine/storetest. Implementations must be safe
// for concurrent use; readers never see a partly applied batch.
type Table interface {
	// Spec returns the table's spec.
	Spec() TableSpec
	// Claim makes the caller the writer of partition p and returns its new
	// epoch, greater than every epoch claimed before for p (after a power
	// loss, than every epoch of a surviving write: a claim may stay
	// unsynced until the next write).
	Claim(ctx context.Context, p int32) (epoch int64, err error)
	// Checkpoint returns the next changelog offset to read for partition
	// p; ok is false when the table holds no checkpoint for p.
	Checkpoint(ctx context.Context, p int32) (next int64, ok bool, err error)
	// Load returns the stored documents of keys, by string(key); keys
	// without a document are absent from the map (not an error).
	Load(ctx context.Context, keys [][]byte) (map[string]Doc, error)
	// Apply writes b atomically: all documents, their index entries and
	// the checkpoint, or nothing. It returns ErrFenced if b.Epoch is not
	// the partition's current claimed epoch (older: another writer claimed
	// it; newer or none: the table lost its state since the claim), or
	// (unless b.Replay) if a document's Version is not newer than the
	// stored one; ErrInvalid (nothing written) if a document fails
	// Doc.Validate. A batch without documents only moves the checkpoint
	// and confirms the claim. A live batch is durable when Apply returns;
	// replay batches may be held in memory and made durable with later
	// ones (a crash undoes them with their checkpoint; restore repeats them).
	Apply(ctx context.Context, b DocBatch) error
	// DropPartition deletes every document, index entry and the checkpoint
	// of partition p.
	DropPartition(ctx context.Context, p int32) error
	// Get returns the document of key, or an error wrapping ErrNotFound.
	Get(ctx context.Context, key []byte) (Doc, error)
	// Query answers q from the index, reading O(Limit) documents (pushed
	// down, no scan). Page.Next is set when the page is full (len(Docs) ==
	// Limit), so a full last page is followed by an empty one. An unknown
	// index or a bad bound is ErrInvalid.
	Query(ctx context.Context, q IndexQuery) (DocPage, error)
}

// Tables is a store that holds several tables. OpenTable opens (creating
// when new) the table of spec; opening the same name again with a
// different spec fails with ErrInvalid. Tables are closed with the store.
// Safe for concurrent use.
type Tables interface {
	OpenTable(ctx context.Context, spec TableSpec) (Table, error)
}

// TableScanner is an optional ability of a Table: iterating over every
// document of one partition (used to re-seed a lost changelog).
type TableScanner interface {
	// ScanPartition calls fn for each document of partition p in
	// unspecified order, stopping at the first error fn returns.
	ScanPartition(ctx context.Context, p int32, fn func(Doc) error) error
}

// FilteredQuerier is an optional ability of a Table: Query that skips,
// inside its index walk and before reading them, the documents whose key
// keep rejects; they do not count toward q.Limit. It is how an instance
// answers for some partitions of a store that holds others too. keep is
// called from the calling goroutine only; a walk cancelled by ctx stops
// with ctx's error.
type FilteredQuerier interface {
	QueryFiltered(ctx context.Context, q IndexQuery, keep func(key []byte) bool) (DocPage, error)
}

// TableSettler is an optional ability of a Table that buffers replayed
// batches (a bulk load): Settle writes out what is buffered and ends the
// buffering, so that a partition about to become active does not wait for
// it. Safe to call at any time.
type TableSettler interface {
	Settle(ctx context.Context) error
}

// TableResetter is an optional ability of a Table: deleting all its
// documents and checkpoints while keeping (or raising) its epochs.
type TableResetter interface {
	Reset(ctx context.Context) error
}
