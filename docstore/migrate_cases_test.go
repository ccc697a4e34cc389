package docstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/vmihailenco/msgpack/v5"
)

// TestMigrateEpochsAlone migrates a movie layout that holds claims and
// nothing else (partitions claimed, never written), and a store with no
// movie layout at all (a new one): the first gets the table with its
// epochs, the second no table.
func TestMigrateEpochsAlone(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = openMigrating(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := rawKeys(t, s, moviesTable().l.prefix, migrationKey); len(got) != 0 {
		t.Fatalf("a store without movies got %d keys of a movies table", len(got))
	}
	b := s.kv.batch()
	for p, epoch := range map[int32]int64{0: 7, 5: 2} {
		if err := b.set(binary.BigEndian.AppendUint32([]byte{oldEpochs}, uint32(p)), int64Value(epoch)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.commit(true); err != nil {
		t.Fatal(err)
	}
	b.release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = openMigrating(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tb := mustTable(t, s, moviesSpec)
	for p, want := range map[int32]int64{0: 8, 5: 3, 1: 1} {
		if got, err := tb.Claim(ctx, p); err != nil || got != want {
			t.Fatalf("Claim(%d) = %d, %v; want %d", p, got, err, want)
		}
	}
	if hasOldKeys(t, s) {
		t.Fatal("keys of the movie layout left after the migration")
	}
}

// TestDecodeOldMovie decodes movie documents as the movie layout and
// Clover wrote them (any field order, integer widths, an integral sum
// stored as an integer) and refuses anything else.
func TestDecodeOldMovie(t *testing.T) {
	full := map[string]any{"_id": "80000000-0000-0007-0000-000000000000", "movieId": int64(7), "partition": int64(2),
		"count": int64(4), "sum": 14.5, "avg": 3.625, "version": int64(99), "rank": "abc", "sources": map[string]any{"2": int64(99), "0": int64(3)}}
	want := engine.Doc{Key: []byte{0, 0, 0, 0, 0, 0, 0, 7}, Partition: 2, Version: 99, Sources: map[int32]int64{2: 99, 0: 3},
		Value: []byte{0, 0, 0, 0, 0, 0, 0, 4, 0x40, 0x2d, 0, 0, 0, 0, 0, 0}, Index: []engine.IndexValue{engine.Num(3.625)}}
	with := func(k string, v any) map[string]any {
		m := maps.Clone(full)
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	intSum := want
	intSum.Value = []byte{0, 0, 0, 0, 0, 0, 0, 4, 0x40, 0x2c, 0, 0, 0, 0, 0, 0}
	intSum.Index = []engine.IndexValue{engine.Num(3.5)}
	noSources := want
	noSources.Sources = nil
	cases := []struct {
		name string
		doc  any
		want engine.Doc
		ok   bool
	}{
		{"as written", full, want, true},
		{"narrow integers", with("count", int8(4)), want, true},
		{"integral sum", with("sum", int64(14)), intSum, true},
		{"no sources", with("sources", map[string]any{}), noSources, true},
		{"unknown field", with("extra", 1), engine.Doc{}, false},
		{"no count", with("count", nil), engine.Doc{}, false},
		{"zero count", with("count", int64(0)), engine.Doc{}, false},
		{"no sum", with("sum", nil), engine.Doc{}, false},
		{"negative partition", with("partition", int64(-1)), engine.Doc{}, false},
		{"string count", with("count", "4"), engine.Doc{}, false},
		{"not a map", []int{1}, engine.Doc{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := msgpack.Marshal(tc.doc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeOldMovie(raw)
			if !tc.ok {
				if !errors.Is(err, ErrMigration) {
					t.Fatalf("decodeOldMovie = %+v, %v; want ErrMigration", got, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decodeOldMovie = %+v, %v; want %+v", got, err, tc.want)
			}
			if _, err := decodeOldMovie(raw[:len(raw)-1]); !errors.Is(err, ErrMigration) {
				t.Fatalf("decodeOldMovie of a truncated document = %v; want ErrMigration", err)
			}
		})
	}
}

// TestMigrateKeepsRefusingOldStore opens a data directory holding only a
// store from before Pebble: the migration does not change that it is
// refused with ErrOldStore, naming `keepstate reset`.
func TestMigrateKeepsRefusingOldStore(t *testing.T) {
	dir := t.TempDir()
	writeV1Store(t, dir)
	_, err := openMigrating(t, dir, nil)
	if !errors.Is(err, ErrOldStore) || !strings.Contains(err.Error(), "keepstate reset") {
		t.Fatalf("Open = %v; want ErrOldStore naming keepstate reset", err)
	}
}

// TestMigrateAgainOverTable migrates the fixture, then finds the movie
// layout written again (a version from before the migration ran on the
// directory and restored the movies from the changelog): the next Open
// rebuilds the table from the movie layout, the newer state, keeping the
// higher epoch of each partition.
func TestMigrateAgainOverTable(t *testing.T) {
	ctx := context.Background()
	dir, want := loadFixture(t)
	s, err := openMigrating(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	movies := []fixtureMovieJSON{
		{ID: 7, Partition: 0, Count: 4, Sum: 14.5, Version: 900, Sources: map[int32]int64{0: 900}},
		{ID: 123456, Partition: 1, Count: 1, Sum: 2, Version: 901, Sources: map[int32]int64{1: 901}},
	}
	b := s.kv.batch()
	for _, m := range movies {
		raw, err := msgpack.Marshal(map[string]any{"_id": fmt.Sprintf("%036d", m.ID), "movieId": m.ID, "partition": int64(m.Partition),
			"count": m.Count, "sum": m.Sum, "avg": m.Sum / float64(m.Count), "version": m.Version, "rank": "r",
			"sources": map[string]any{strconv.Itoa(int(m.Partition)): m.Version}})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.set(append(slices.Clone(oldDocs), fmt.Sprintf("%036d", m.ID)...), raw); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range [][3]int64{{int64(oldEpochs), 0, 50}, {int64(oldCheckpoints), 0, 9}} {
		if err := b.set(binary.BigEndian.AppendUint32([]byte{byte(kv[0])}, uint32(kv[1])), int64Value(kv[2])); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.commit(true); err != nil {
		t.Fatal(err)
	}
	b.release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = openMigrating(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tb := mustTable(t, s, moviesSpec)
	got := queryAll(t, tb, engine.IndexQuery{Index: "avg"}, 10)
	if len(got) != 2 || !reflect.DeepEqual(got[0], movies[1].doc()) || !reflect.DeepEqual(got[1], movies[0].doc()) {
		t.Fatalf("the table holds %+v; want the 2 movies of the movie layout", got)
	}
	for p, wantNext := range map[int32]int64{0: 9, 1: 0, 2: 0} {
		if next, ok, err := tb.Checkpoint(ctx, p); err != nil || next != wantNext || ok != (wantNext > 0) {
			t.Fatalf("Checkpoint(%d) = %d, %v, %v; want %d", p, next, ok, err, wantNext)
		}
	}
	for p, wantEpoch := range map[int32]int64{0: 51, 1: want.Epochs[1] + 1, 2: want.Epochs[2] + 1} {
		if got, err := tb.Claim(ctx, p); err != nil || got != wantEpoch {
			t.Fatalf("Claim(%d) = %d, %v; want %d", p, got, err, wantEpoch)
		}
	}
	if hasOldKeys(t, s) {
		t.Fatal("keys of the movie layout left after the migration")
	}
	checkOrders(t, s, want.Orders)
}

// TestMigrateRefusesOtherMoviesTable opens the fixture after adding a
// table "movies" with other indexes: Open fails with ErrMigration (and
// engine.ErrInvalid, the table's own refusal) and writes nothing; the
// movie layout is still there, and the next Open refuses it the same way.
func TestMigrateRefusesOtherMoviesTable(t *testing.T) {
	dir, _ := loadFixture(t)
	db := openRawKV(t, dir)
	other := &table{spec: engine.TableSpec{Name: "movies", Indexes: []engine.IndexSpec{{Name: "average", Kind: engine.IndexNumber}}},
		l: newTableLayout("movies")}
	b := db.batch()
	if err := other.create(b); err != nil {
		t.Fatal(err)
	}
	if err := b.commit(true); err != nil {
		t.Fatal(err)
	}
	b.release()
	before := kvKeys(t, db)
	if err := db.close(false); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := openMigrating(t, dir, nil)
		if !errors.Is(err, ErrMigration) || !errors.Is(err, engine.ErrInvalid) {
			t.Fatalf("Open = %v; want ErrMigration and ErrInvalid", err)
		}
	}
	db = openRawKV(t, dir)
	defer db.close(false)
	if got := kvKeys(t, db); !reflect.DeepEqual(got, before) {
		t.Fatalf("the refused migration changed the store: %d keys, %d before", len(got), len(before))
	}
}
