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
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/keepstate/keepstate/engine"
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
	return kvKeys(t, s.kv, prefixes...)
}

// openRawKV opens the Pebble database of dir without a Store (no
// migration, no lock); the caller closes it.
func openRawKV(t testing.TB, dir string) kv {
	t.Helper()
	db, err := openPebble(filepath.Join(dir, storeDir), defaults(), slog.New(slog.DiscardHandler), true)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// kvKeys is rawKeys of a kv.
func kvKeys(t testing.TB, db kv, prefixes ...[]byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	snap := db.snapshot()
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

// openMigrating opens dir (which migrates what it holds of the movie
// layout), its log in logs.
func openMigrating(t testing.TB, dir string, logs *bytes.Buffer, opts ...Option) (*Store, error) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, nil))
	}
	return Open(dir, append([]Option{WithFsync(false), WithLogger(log)}, opts...)...)
}

// TestMigrateFixture reads the fixture's keys (the movie layout) and opens
// it: every movie is a document of the table
// "movies", exact, found by Get, Load and the avg queries in both orders;
// each partition keeps its checkpoint, and a Claim returns an epoch above
// the last claimed on the movie layout; the orders table is untouched key
// for key; no key of the movie layout is left; a second Open changes
// nothing; and the table takes writes and drops as any other.
func TestMigrateFixture(t *testing.T) {
	ctx := context.Background()
	dir, want := loadFixture(t)

	plain := openRawKV(t, dir)
	if has, err := (movieMigration{db: plain}).hasOldLayout(); err != nil || !has {
		t.Fatalf("the fixture holds no key of the movie layout (%v)", err)
	}
	if got := kvKeys(t, plain, moviesTable().l.family(tabSpec)); len(got) != 0 {
		t.Fatalf("the fixture holds a table movies before the migration: %q", got)
	}
	orders := kvKeys(t, plain, ordersKeys...)
	if len(orders) < len(want.Orders.Docs) {
		t.Fatalf("the fixture holds %d keys of the orders table; want at least %d", len(orders), len(want.Orders.Docs))
	}
	if err := plain.close(false); err != nil {
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
