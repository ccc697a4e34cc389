package docstore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// The movie migration moves the movie job's state from the movie layout
// of earlier versions into the table "movies" (movieTableSpec), without
// replaying the changelog: every movie becomes the movie job's document
// (Doc.Key the 8-byte big-endian id, Doc.Value count and sum bits, 16
// bytes big-endian, Doc.Index the average), and each partition's
// checkpoint and claim epoch are carried over, so a Claim after it
// returns an epoch above every epoch claimed before (an old writer stays
// fenced).
//
// The movie layout held one Clover document per movie in the "movies"
// collection (fields movieId, partition, count, sum, avg, version,
// sources, rank), Clover's index entries on rank, and one key per
// partition for checkpoints ('b') and claim epochs ('e') and one members
// key per movie ('m', partition then movie id).
//
// It runs inside Open, before the Store exists, and is crash-safe and
// idempotent in three steps, each a batch recording its progress under
// migrationKey:
//
//  1. begin (synced): create (or check) the table, empty its documents,
//     index entries, members and checkpoints (the movie layout is the
//     newer state whenever it holds anything), copy the checkpoints, raise
//     each table epoch to the movie layout's, and record the migration.
//  2. copy: the documents, migrateBatchDocs per batch, in key order, each
//     batch recording the last key copied and the count so far.
//  3. finish (synced): set the collection size, delete every key of the
//     movie layout and the record.
//
// A crash after step 1 resumes the copy after the last key recorded; a
// store without the movie layout's keys is left alone. It decodes the
// movie documents itself (decodeOldMovie) and writes with tableWriter.

// movieTableSpec is the spec of the table the movies move into: the movie
// job's table.
var movieTableSpec = engine.TableSpec{Name: "movies", Indexes: []engine.IndexSpec{{Name: "avg", Kind: engine.IndexNumber}}, TiesAscending: true}

// Keys of the movie layout (namespaces of kv.go no longer used otherwise).
const (
	oldCheckpoints byte = 'b' // partition -> next changelog offset
	oldEpochs      byte = 'e' // partition -> last claimed epoch
	oldMembers     byte = 'm' // partition, movie -> nothing
	oldCollection       = "movies"
)

var (
	// oldClover prefixes the movie collection's documents ("d:") and
	// index entries ("i:") in Clover's keys.
	oldClover  = nsKey(nsClover, []byte("c:"+oldCollection+";"))
	oldDocs    = nsKey(nsClover, []byte("c:"+oldCollection+";d:"))
	oldCollKey = nsKey(nsClover, []byte("coll:"+oldCollection))
	// migrationKey records a migration under way (migrationState).
	migrationKey = nsKey(nsMeta, []byte("movie-migration"))
)

// oldRanges are the key ranges of the movie layout. The collection's
// metadata is not one: an empty store of the movie layout holds it, and
// holds nothing to migrate (finish deletes it with the rest).
func oldRanges() [][2][]byte {
	return [][2][]byte{
		{oldClover, prefixUpper(oldClover)},
		{{oldCheckpoints}, nsUpper(oldCheckpoints)},
		{{oldEpochs}, nsUpper(oldEpochs)},
		{{oldMembers}, nsUpper(oldMembers)},
	}
}

// migrateBatchDocs is how many documents one copy batch writes (about
// 2 MB of keys and values); a variable for tests.
var migrateBatchDocs = 8192

// ErrMigration means the movie layout could not be migrated (a document
// is not a movie, or the table "movies" exists with other indexes); Open
// fails with it, the store left as after the last completed step.
var ErrMigration = errors.New("docstore: movie migration failed")

// movieMigration is one run of the migration on db (Open runs one on
// every store).
type movieMigration struct {
	db    kv
	log   *slog.Logger
	batch int // documents per copy batch
}

// migrationState is the value of migrationKey: the key of the last
// document copied (nil before the first) and how many were.
type migrationState struct {
	After  []byte `json:"after"`
	Copied int    `json:"copied"`
}

// run migrates the movie layout, if any, resuming a migration an earlier
// run began.
func (m movieMigration) run() error {
	start := time.Now()
	st, found, err := m.state()
	if err != nil {
		return fmt.Errorf("movie migration: %w", err)
	}
	if found {
		m.log.Warn("docstore: resuming the migration of the movies into a table", "table", movieTableSpec.Name, "copied", st.Copied)
	} else {
		has, err := m.hasOldLayout()
		if err != nil || !has {
			return err
		}
		m.log.Info("docstore: migrating the movies into a table", "table", movieTableSpec.Name)
		var parts, epochs int
		if parts, epochs, err = m.begin(); err != nil {
			return fmt.Errorf("movie migration: begin: %w", err)
		}
		m.log.Info("docstore: movie migration begun", "checkpoints", parts, "epochs", epochs)
	}
	if st, err = m.copy(st); err != nil {
		return fmt.Errorf("movie migration: copy after %d movies: %w", st.Copied, err)
	}
	if err := m.finish(st); err != nil {
		return fmt.Errorf("movie migration: finish: %w", err)
	}
	m.log.Info("docstore: movies migrated", "table", movieTableSpec.Name, "movies", st.Copied, "took", time.Since(start))
	return nil
}

// state reads the record of a migration under way.
func (m movieMigration) state() (st migrationState, found bool, err error) {
	snap := m.db.snapshot()
	defer snap.release()
	raw, err := snap.get(migrationKey)
	if err != nil || raw == nil {
		return st, false, err
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, false, fmt.Errorf("%w: record %q: %w", ErrMigration, raw, err)
	}
	return st, true, nil
}

// hasOldLayout reports whether any key of the movie layout exists.
func (m movieMigration) hasOldLayout() (bool, error) {
	snap := m.db.snapshot()
	defer snap.release()
	for _, r := range oldRanges() {
		if found, err := anyKey(snap, r[0], r[1]); err != nil || found {
			return found, err
		}
	}
	return false, nil
}

// moviesTable returns the table the movies move into, without a Store.
func moviesTable() *table {
	return &table{spec: movieTableSpec, l: newTableLayout(movieTableSpec.Name)}
}

// begin is step 1; it returns how many checkpoints and epochs it carried.
func (m movieMigration) begin() (parts, epochs int, err error) {
	t := moviesTable()
	b := m.db.batch() // indexed: Clover reads what it writes
	defer b.release()
	raw, err := b.get(t.l.family(tabSpec))
	switch {
	case err != nil:
		return 0, 0, err
	case raw == nil:
		err = t.create(b)
	default:
		if err = t.sameSpec(raw); err != nil {
			err = fmt.Errorf("%w: %w", ErrMigration, err)
		}
	}
	if err != nil {
		return 0, 0, err
	}
	if err := t.deleteRows(b); err != nil {
		return 0, 0, err
	}
	if err := setSize(b, t.l.collKey, func(int) int { return 0 }); err != nil {
		return 0, 0, err
	}
	parts, err = eachPartition(b, oldCheckpoints, func(p int32, next int64) error {
		return b.set(t.l.partKey(tabCheckpoint, p), int64Value(next))
	})
	if err != nil {
		return 0, 0, err
	}
	epochs, err = eachPartition(b, oldEpochs, func(p int32, epoch int64) error {
		key := t.l.partKey(tabEpochs, p)
		claimed, _, err := getInt64(b, key)
		if err != nil || claimed >= epoch {
			return err
		}
		return b.set(key, int64Value(epoch))
	})
	if err != nil {
		return 0, 0, err
	}
	if err := setMigrationState(b, migrationState{}); err != nil {
		return 0, 0, err
	}
	return parts, epochs, b.commit(true)
}

// eachPartition calls fn with each partition's value in namespace ns of
// the movie layout (4-byte partition keys, int64 values).
func eachPartition(r kvReader, ns byte, fn func(p int32, v int64) error) (n int, err error) {
	it, err := r.iter([]byte{ns}, nsUpper(ns), false)
	if err != nil {
		return 0, err
	}
	defer closeInto(it, &err)
	for ok := it.seek([]byte{ns}); ok; ok = it.next() {
		k, v := it.key(), it.value()
		if len(k) != 5 || len(v) != 8 {
			return n, fmt.Errorf("%w: key %q holds %d bytes; want a partition and an int64", ErrMigration, k, len(v))
		}
		if err := fn(int32(binary.BigEndian.Uint32(k[1:])), int64(binary.BigEndian.Uint64(v))); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// copy is step 2: it copies the documents after st.After and returns the
// final state.
func (m movieMigration) copy(st migrationState) (_ migrationState, err error) {
	snap := m.db.snapshot()
	defer snap.release()
	it, err := snap.iter(oldDocs, prefixUpper(oldDocs), false)
	if err != nil {
		return st, err
	}
	defer closeInto(it, &err)
	from := oldDocs
	if st.After != nil {
		from = append(append([]byte(nil), st.After...), 0)
	}
	t, enc := moviesTable(), newTableEncoder()
	for ok := it.seek(from); ok; {
		b := m.db.writeBatch(m.batch * 256)
		w := tableWriter{t: t, b: b, enc: enc}
		n := 0
		var last []byte
		for ; ok && n < m.batch; ok = it.next() {
			doc, err := decodeOldMovie(it.value())
			if err == nil {
				if verr := doc.Validate(movieTableSpec); verr != nil {
					err = fmt.Errorf("%w: %w", ErrMigration, verr)
				}
			}
			if err == nil {
				err = w.put(doc, tablePrior{})
			}
			if err != nil {
				b.release()
				return st, fmt.Errorf("document %q: %w", it.key()[len(oldDocs):], err)
			}
			last = append(last[:0], it.key()...)
			n++
		}
		next := migrationState{After: last, Copied: st.Copied + n}
		err := setMigrationState(b, next)
		if err == nil {
			err = b.commit(false) // the synced finish makes it durable
		}
		b.release()
		if err != nil {
			return st, err
		}
		st = next
	}
	return st, nil
}

// finish is step 3.
func (m movieMigration) finish(st migrationState) error {
	t := moviesTable()
	b := m.db.batch()
	defer b.release()
	if err := setSize(b, t.l.collKey, func(int) int { return st.Copied }); err != nil {
		return err
	}
	for _, r := range oldRanges() {
		if err := b.delRange(r[0], r[1]); err != nil {
			return err
		}
	}
	if err := b.del(oldCollKey); err != nil { // a new store has no movies collection
		return err
	}
	if err := b.del(migrationKey); err != nil {
		return err
	}
	return b.commit(true)
}

// setMigrationState records st in b.
func setMigrationState(b kvBatch, st migrationState) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return b.set(migrationKey, raw)
}

// decodeOldMovie reads a movie document of the movie layout (a msgpack
// map, any field order and integer width) into the movie table's document.
func decodeOldMovie(raw []byte) (engine.Doc, error) {
	var doc engine.Doc
	r := mpReader{b: raw}
	n, ok := r.mapLen()
	if !ok {
		return doc, fmt.Errorf("%w: not a map", ErrMigration)
	}
	var id, count int64
	var sum float64
	const need = 1<<5 - 1 // movieId, partition, count, sum, version
	seen := 0
	for range n {
		name, ok := r.str()
		if !ok {
			return doc, fmt.Errorf("%w: malformed field name", ErrMigration)
		}
		switch string(name) {
		case "movieId":
			id, ok = r.int()
			seen |= 1
		case "partition":
			var p int64
			p, ok = r.int()
			ok = ok && p >= 0 && p <= math.MaxInt32
			doc.Partition = int32(p)
			seen |= 2
		case "count":
			count, ok = r.int()
			seen |= 4
		case "sum":
			sum, ok = r.float()
			seen |= 8
		case "version":
			doc.Version, ok = r.int()
			seen |= 16
		case "sources":
			doc.Sources, ok = r.sources()
		case "avg":
			_, ok = r.float()
		case "_id", "rank":
			_, ok = r.str()
		default:
			return doc, fmt.Errorf("%w: unknown field %q", ErrMigration, name)
		}
		if !ok {
			return doc, fmt.Errorf("%w: malformed field %q", ErrMigration, name)
		}
	}
	if seen != need || !r.done() {
		return doc, fmt.Errorf("%w: incomplete movie document", ErrMigration)
	}
	if count <= 0 {
		return doc, fmt.Errorf("%w: movie %d has count %d", ErrMigration, id, count)
	}
	doc.Key = binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(id))
	doc.Value = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(count)), math.Float64bits(sum))
	doc.Index = []engine.IndexValue{engine.Num(sum / float64(count))}
	return doc, nil
}
