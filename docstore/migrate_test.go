package docstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/vmihailenco/msgpack/v5"
)

// The migration tests read the fixture testdata/movielayout-v3, a store
// written by the movie Store API (TestWriteMigrationFixture), and use
// only the table API and raw keys: they do not depend on the movie
// layout's code.

const (
	fixtureName   = "movielayout-v3"
	fixtureMovies = 2000
)

// fixtureOrdersSpec is the fixture's other table.
var fixtureOrdersSpec = engine.TableSpec{Name: "orders", Indexes: []engine.IndexSpec{
	{Name: "total", Kind: engine.IndexNumber}, {Name: "tier", Kind: engine.IndexString}}}

// moviesSpec is the movie job's table, as the program opens it.
var moviesSpec = engine.TableSpec{Name: "movies", Indexes: []engine.IndexSpec{{Name: "avg", Kind: engine.IndexNumber}}, TiesAscending: true}

// fixture is testdata/<fixtureName>/expected.json: what the generator
// wrote.
type fixture struct {
	Written     string             `json:"written"`
	Movies      []fixtureMovieJSON `json:"movies"`
	Checkpoints map[int32]int64    `json:"checkpoints"`
	Epochs      map[int32]int64    `json:"epochs"` // the last epoch claimed
	Orders      fixtureTable       `json:"orders"`
}

type fixtureMovieJSON struct {
	ID        int64           `json:"id"`
	Partition int32           `json:"p"`
	Count     int64           `json:"count"`
	Sum       float64         `json:"sum"`
	Version   int64           `json:"v"`
	Sources   map[int32]int64 `json:"src"`
}

type fixtureTable struct {
	Docs        []engine.Doc    `json:"docs"`
	Checkpoints map[int32]int64 `json:"checkpoints"`
	Epochs      map[int32]int64 `json:"epochs"`
}

// doc is the movie table's document of m.
func (m fixtureMovieJSON) doc() engine.Doc {
	value := binary.BigEndian.AppendUint64(nil, uint64(m.Count))
	value = binary.BigEndian.AppendUint64(value, math.Float64bits(m.Sum))
	return engine.Doc{Key: binary.BigEndian.AppendUint64(nil, uint64(m.ID)), Partition: m.Partition, Version: m.Version,
		Sources: m.Sources, Value: value, Index: []engine.IndexValue{engine.Num(m.Sum / float64(m.Count))}}
}

// loadFixture copies the fixture's store into a new data directory and
// returns it with the expected contents.
func loadFixture(t testing.TB) (string, fixture) {
	t.Helper()
	src := filepath.Join("testdata", fixtureName)
	var want fixture
	raw, err := os.ReadFile(filepath.Join(src, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Movies) != fixtureMovies {
		t.Fatalf("fixture holds %d movies; want %d", len(want.Movies), fixtureMovies)
	}
	dir := t.TempDir()
	if err := copyDir(filepath.Join(src, storeDir), filepath.Join(dir, storeDir)); err != nil {
		t.Fatal(err)
	}
	return dir, want
}

// copyDir copies the regular files of src into dst (created).
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o750); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return fmt.Errorf("copy %s: %s is not a regular file", src, e.Name())
		}
		raw, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), raw, 0o640); err != nil {
			return err
		}
	}
	return nil
}

// rawKeys returns every key and value of s whose key starts with one of
// prefixes (all of them without prefixes).
func rawKeys(t testing.TB, s *Store, prefixes ...[]byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	snap := s.kv.snapshot()
	defer snap.release()
	it, err := snap.iter(nil, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.seek(nil); ok; ok = it.next() {
		if len(prefixes) == 0 || slices.ContainsFunc(prefixes, func(p []byte) bool { return bytes.HasPrefix(it.key(), p) }) {
			out[string(it.key())] = string(it.value())
		}
	}
	if err := it.close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ordersKeys are the prefixes of the orders table's keys.
var ordersKeys = [][]byte{
	append([]byte{nsTables}, "orders\x00"...),
	nsKey(nsClover, []byte("c:t_orders;")),
	nsKey(nsClover, []byte("coll:t_orders")),
}

// hasOldKeys reports whether s holds a key of the movie layout or the
// migration's record.
func hasOldKeys(t testing.TB, s *Store) bool {
	t.Helper()
	has, err := movieMigration{db: s.kv}.hasOldLayout()
	if err != nil {
		t.Fatal(err)
	}
	return has || len(rawKeys(t, s, migrationKey)) > 0
}

// openMigrating opens dir with the migration on, its log in logs.
func openMigrating(t testing.TB, dir string, logs *bytes.Buffer, opts ...Option) (*Store, error) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, nil))
	}
	s, err := Open(dir, append([]Option{WithFsync(false), WithMovieMigration(true), WithLogger(log)}, opts...)...)
	if err == nil {
		<-s.Warmed()
	}
	return s, err
}

// TestMigrateFixture opens the fixture without the migration (the movie
// layout stays) and with it: every movie is a document of the table
// "movies", exact, found by Get, Load and the avg queries in both orders;
// each partition keeps its checkpoint, and a Claim returns an epoch above
// the last claimed on the movie layout; the orders table is untouched key
// for key; no key of the movie layout is left; a second Open changes
// nothing; and the table takes writes and drops as any other.
func TestMigrateFixture(t *testing.T) {
	ctx := context.Background()
	dir, want := loadFixture(t)

	plain, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	if !hasOldKeys(t, plain) {
		t.Fatal("the fixture holds no key of the movie layout")
	}
	if got := rawKeys(t, plain, moviesTable().l.family(tabSpec)); len(got) != 0 {
		t.Fatalf("the fixture holds a table movies before the migration: %q", got)
	}
	orders := rawKeys(t, plain, ordersKeys...)
	if len(orders) < len(want.Orders.Docs) {
		t.Fatalf("the fixture holds %d keys of the orders table; want at least %d", len(orders), len(want.Orders.Docs))
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	s, err := openMigrating(t, dir, &logs)
	if err != nil {
		t.Fatal(err)
	}
	if hasOldKeys(t, s) {
		t.Fatal("keys of the movie layout left after the migration")
	}
	if got := rawKeys(t, s, ordersKeys...); !reflect.DeepEqual(got, orders) {
		t.Fatalf("the orders table changed: %d keys before, %d after", len(orders), len(got))
	}
	if want := fmt.Sprintf("movies=%d", fixtureMovies); !strings.Contains(logs.String(), want) {
		t.Fatalf("the log does not say %q:\n%s", want, logs.String())
	}
	all := rawKeys(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	logs.Reset()
	s, err = openMigrating(t, dir, &logs)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := rawKeys(t, s); !reflect.DeepEqual(got, all) {
		t.Fatalf("a second Open changed the store: %d keys, %d before", len(got), len(all))
	}
	if strings.Contains(logs.String(), "migrat") {
		t.Fatalf("a second Open migrated again:\n%s", logs.String())
	}
	checkMigrated(t, s, want)
	checkOrders(t, s, want.Orders)
	checkWritable(t, ctx, s, want)
}

// checkMigrated checks the movies table of s against want (reading only)
// and the claims (a Claim per partition).
func checkMigrated(t *testing.T, s *Store, want fixture) {
	t.Helper()
	ctx := context.Background()
	tb := mustTable(t, s, moviesSpec)
	docs := make([]engine.Doc, len(want.Movies))
	keys := make([][]byte, len(want.Movies))
	perPart := map[int32]int{}
	for i, m := range want.Movies {
		docs[i], keys[i] = m.doc(), m.doc().Key
		perPart[m.Partition]++
		got, err := tb.Get(ctx, docs[i].Key)
		if err != nil || !reflect.DeepEqual(got, docs[i]) {
			t.Fatalf("movie %d: Get = %+v, %v; want %+v", m.ID, got, err, docs[i])
		}
	}
	loaded, err := tb.Load(ctx, keys)
	if err != nil || len(loaded) != len(docs) {
		t.Fatalf("Load = %d documents, %v; want %d", len(loaded), err, len(docs))
	}
	for _, d := range docs {
		if got := loaded[string(d.Key)]; !reflect.DeepEqual(got, d) {
			t.Fatalf("Load of %x = %+v; want %+v", d.Key, got, d)
		}
	}
	for _, q := range []engine.IndexQuery{
		{Index: "avg"}, {Index: "avg", Desc: true},
		{Index: "avg", Min: engine.Num(2.5), HasMin: true, Max: engine.Num(4), HasMax: true},
		{Index: "avg", Min: engine.Num(2.5), HasMin: true, Max: engine.Num(4), HasMax: true, Desc: true},
	} {
		var want []engine.Doc
		for _, d := range docs {
			if q.InRange(d.Index[0], engine.IndexNumber) {
				want = append(want, d)
			}
		}
		slices.SortFunc(want, func(a, b engine.Doc) int {
			c := cmp.Compare(a.Index[0].Num, b.Index[0].Num)
			if q.Desc {
				c = -c
			}
			return cmp.Or(c, bytes.Compare(a.Key, b.Key)) // ties by key ascending (TiesAscending)
		})
		got := queryAll(t, tb, q, 97)
		if len(got) != len(want) {
			t.Fatalf("query %+v: %d documents; want %d", q, len(got), len(want))
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("query %+v: position %d is %x; want %x", q, i, got[i].Key, want[i].Key)
			}
		}
	}
	for p := range int32(4) {
		next, ok, err := tb.Checkpoint(ctx, p)
		if wantNext, wantOK := want.Checkpoints[p]; err != nil || ok != wantOK || next != wantNext {
			t.Fatalf("Checkpoint(%d) = %d, %v, %v; want %d, %v", p, next, ok, err, wantNext, wantOK)
		}
		n := 0
		if err := tb.ScanPartition(ctx, p, func(engine.Doc) error { n++; return nil }); err != nil || n != perPart[p] {
			t.Fatalf("ScanPartition(%d) = %d documents, %v; want %d", p, n, err, perPart[p])
		}
	}
	for p, last := range want.Epochs {
		epoch, err := tb.Claim(ctx, p)
		if err != nil || epoch <= last {
			t.Fatalf("Claim(%d) = %d, %v; want an epoch above %d, the last claimed before the migration", p, epoch, err, last)
		}
	}
}

// queryAll pages through q with pages of limit.
func queryAll(t *testing.T, tb engine.Table, q engine.IndexQuery, limit int) []engine.Doc {
	t.Helper()
	var out []engine.Doc
	q.Limit = limit
	for {
		page, err := tb.Query(context.Background(), q)
		if err != nil {
			t.Fatalf("query %+v: %v", q, err)
		}
		out = append(out, page.Docs...)
		if page.Next == nil {
			return out
		}
		q.After = page.Next
	}
}

// checkOrders checks the orders table against want: documents,
// checkpoints, and a Claim above the last.
func checkOrders(t *testing.T, s *Store, want fixtureTable) {
	t.Helper()
	ctx := context.Background()
	tb := mustTable(t, s, fixtureOrdersSpec)
	for _, d := range want.Docs {
		got, err := tb.Get(ctx, d.Key)
		if err != nil || !reflect.DeepEqual(got, d) {
			t.Fatalf("orders %q: Get = %+v, %v; want %+v", d.Key, got, err, d)
		}
	}
	for p, next := range want.Checkpoints {
		if got, ok, err := tb.Checkpoint(ctx, p); err != nil || !ok || got != next {
			t.Fatalf("orders Checkpoint(%d) = %d, %v, %v; want %d", p, got, ok, err, next)
		}
	}
	for p, last := range want.Epochs {
		if epoch, err := tb.Claim(ctx, p); err != nil || epoch != last+1 {
			t.Fatalf("orders Claim(%d) = %d, %v; want %d", p, epoch, err, last+1)
		}
	}
}

// checkWritable updates a migrated movie (new average) with the epoch of
// a new claim, refuses the epoch claimed before, and drops a partition.
func checkWritable(t *testing.T, ctx context.Context, s *Store, want fixture) {
	t.Helper()
	tb := mustTable(t, s, moviesSpec)
	m := want.Movies[0]
	epoch, err := tb.Claim(ctx, m.Partition)
	if err != nil {
		t.Fatal(err)
	}
	old := m.doc()
	m.Count, m.Sum, m.Version = m.Count+1, m.Sum+5, m.Version+1
	d := m.doc()
	stale := engine.DocBatch{Partition: m.Partition, Epoch: want.Epochs[m.Partition], Docs: []engine.Doc{d}, Checkpoint: 1 << 40}
	if err := tb.Apply(ctx, stale); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("Apply with the epoch claimed before the migration = %v; want ErrFenced", err)
	}
	b := engine.DocBatch{Partition: m.Partition, Epoch: epoch, Docs: []engine.Doc{d}, Checkpoint: 1 << 40}
	if err := tb.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	at := func(v engine.IndexValue) []engine.Doc {
		return queryAll(t, tb, engine.IndexQuery{Index: "avg", Min: v, HasMin: true, Max: v, HasMax: true}, 1000)
	}
	if slices.ContainsFunc(at(old.Index[0]), func(x engine.Doc) bool { return bytes.Equal(x.Key, d.Key) }) {
		t.Fatalf("movie %d still found at its old average %v", m.ID, old.Index[0].Num)
	}
	if !slices.ContainsFunc(at(d.Index[0]), func(x engine.Doc) bool { return reflect.DeepEqual(x, d) }) {
		t.Fatalf("movie %d not found at its new average %v", m.ID, d.Index[0].Num)
	}
	if err := tb.DropPartition(ctx, 2); err != nil {
		t.Fatal(err)
	}
	left := len(queryAll(t, tb, engine.IndexQuery{Index: "avg"}, 1000))
	dropped := 0
	for _, m := range want.Movies {
		if m.Partition == 2 {
			dropped++
		}
	}
	if left != len(want.Movies)-dropped {
		t.Fatalf("%d movies left after dropping partition 2; want %d", left, len(want.Movies)-dropped)
	}
}

// commitFaultKV fails the commit numbered failAt (1-based, counting every
// batch's commit) and every commit after it, as a crash there would: what
// committed before stays.
type commitFaultKV struct {
	kv
	failAt  int64
	commits atomic.Int64
}

func (f *commitFaultKV) batch() kvBatch { return &commitFaultBatch{kvBatch: f.kv.batch(), f: f} }
func (f *commitFaultKV) writeBatch(size int) kvBatch {
	return &commitFaultBatch{kvBatch: f.kv.writeBatch(size), f: f}
}

type commitFaultBatch struct {
	kvBatch
	f *commitFaultKV
}

func (b *commitFaultBatch) commit(sync bool) error {
	if b.f.commits.Add(1) >= b.f.failAt {
		return errInjected
	}
	return b.kvBatch.commit(sync)
}

// withCommitFault opens the store on Pebble with the commits from failAt
// on failing.
func withCommitFault(failAt int64) Option {
	return func(o *options) {
		o.openKV = func(path string, o options, log *slog.Logger, mustExist bool) (kv, error) {
			p, err := openPebble(path, o, log, mustExist)
			if err != nil {
				return nil, err
			}
			return &commitFaultKV{kv: p, failAt: failAt}, nil
		}
	}
}

// TestMigrateCrash interrupts the migration of the fixture at each of its
// commits (in copy batches of 500 documents: begin, 4 copies, finish),
// once or twice in a row: the failed Open leaves the store as the last
// commit did, and the next Open completes the migration, exactly.
func TestMigrateCrash(t *testing.T) {
	defer func(n int) { migrateBatchDocs = n }(migrateBatchDocs)
	migrateBatchDocs = 500
	const commits = 6
	cases := [][]int64{{2, 4}, {4, 3}, {6, 1}}
	for at := range int64(commits) {
		cases = append(cases, []int64{at + 1})
	}
	if testing.Short() {
		cases = [][]int64{{3}, {2, 4}}
	}
	t.Run("commits", func(t *testing.T) {
		dir, _ := loadFixture(t)
		s, err := openMigrating(t, dir, nil, withCommitFault(commits+1))
		if err != nil {
			t.Fatalf("Open with commit %d failing = %v; want the migration done in %d commits", commits+1, err, commits)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
	for _, crashes := range cases {
		t.Run(fmt.Sprint(crashes), func(t *testing.T) {
			dir, want := loadFixture(t)
			for _, at := range crashes {
				_, err := openMigrating(t, dir, nil, withCommitFault(at))
				if !errors.Is(err, errInjected) {
					t.Fatalf("Open with commit %d failing = %v; want the injected failure", at, err)
				}
			}
			s, err := openMigrating(t, dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if hasOldKeys(t, s) {
				t.Fatal("keys of the movie layout left after the migration")
			}
			checkMigrated(t, s, want)
			checkOrders(t, s, want.Orders)
		})
	}
}

// TestMigrateEpochsAlone migrates a movie layout that holds claims and
// nothing else (partitions claimed, never written), and a store with no
// movie layout at all (created without the migration): the first gets
// the table with its epochs, the second no table.
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
// store from before Pebble with the migration on: it is still refused
// with ErrOldStore, naming `keepstate reset`.
func TestMigrateKeepsRefusingOldStore(t *testing.T) {
	dir := t.TempDir()
	writeV1Store(t, dir)
	_, err := openMigrating(t, dir, nil)
	if !errors.Is(err, ErrOldStore) || !strings.Contains(err.Error(), "keepstate reset") {
		t.Fatalf("Open = %v; want ErrOldStore naming keepstate reset", err)
	}
}
