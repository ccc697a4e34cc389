package redisstore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// loadFixture loads the movie layout fixture into r (under its own
// prefix) and opens a store on it, without opening the table.
func loadFixture(t *testing.T, r *testkit.Redis, opts ...Option) (*Store, fixtureExpect) {
	t.Helper()
	exp, err := readExpect(fixtureExpectPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(exp.Movies) < 2000 {
		t.Fatalf("fixture has %d movies, want thousands", len(exp.Movies))
	}
	s := openFixtureStore(t, r, exp, opts...)
	if _, err := loadDump(ctxT(t), s.client, fixtureDump); err != nil {
		t.Fatal(err)
	}
	return s, exp
}

func openFixtureStore(t *testing.T, r *testkit.Redis, exp fixtureExpect, opts ...Option) *Store {
	t.Helper()
	opts = append([]Option{WithPrefix(exp.Prefix), WithTableStream(MovieTableName, movieStream)}, opts...)
	s, err := Open(ctxT(t), r.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// checkMigrated checks that tb serves every movie of exp exactly, in the
// avg order, with every partition's checkpoint, epoch and batch token, and
// that no key of the movie layout is left.
func checkMigrated(t *testing.T, s *Store, tb *table, exp fixtureExpect) {
	t.Helper()
	ctx := ctxT(t)
	byKey := make(map[string]fixtureMovie, len(exp.Movies))
	for _, m := range exp.Movies {
		byKey[string(binary.BigEndian.AppendUint64(nil, uint64(m.ID)))] = m
	}
	keys := make([][]byte, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, []byte(k))
	}
	got, err := tb.Load(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(byKey) {
		t.Errorf("Load found %d movies, want %d", len(got), len(byKey))
	}
	for k, m := range byKey {
		d, ok := got[k]
		if !ok {
			t.Errorf("movie %d missing", m.ID)
			continue
		}
		count := int64(binary.BigEndian.Uint64(d.Value))
		sum := math.Float64frombits(binary.BigEndian.Uint64(d.Value[8:]))
		avg := m.Sum / float64(m.Count)
		if len(d.Value) != 16 || count != m.Count || math.Float64bits(sum) != math.Float64bits(m.Sum) ||
			len(d.Index) != 1 || math.Float64bits(d.Index[0].Num) != math.Float64bits(avg) ||
			d.Version != m.Version || d.Partition != m.Partition || !maps.Equal(d.Sources, m.Sources) {
			t.Errorf("movie %d = value %x (count %d sum %v) index %v version %d partition %d sources %v; want count %d sum %v avg %v version %d partition %d sources %v",
				m.ID, d.Value, count, sum, d.Index, d.Version, d.Partition, d.Sources,
				m.Count, m.Sum, avg, m.Version, m.Partition, m.Sources)
		}
	}
	// The avg index holds every movie once, in the table's order.
	want := slices.Clone(exp.Movies)
	key := func(m fixtureMovie) []byte { return binary.BigEndian.AppendUint64(nil, uint64(m.ID)) }
	slices.SortFunc(want, func(a, b fixtureMovie) int {
		return cmp.Or(cmp.Compare(b.Sum/float64(b.Count), a.Sum/float64(a.Count)), bytes.Compare(key(a), key(b)))
	})
	var order []int64
	q := engine.IndexQuery{Index: "avg", Desc: true, Limit: 500}
	for {
		page, err := tb.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Docs {
			order = append(order, int64(binary.BigEndian.Uint64(d.Key)))
		}
		if page.Next == nil {
			break
		}
		q.After = page.Next
	}
	wantOrder := make([]int64, len(want))
	for i, m := range want {
		wantOrder[i] = m.ID
	}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("avg order has %d movies, want %d in order (avg descending, key ascending)", len(order), len(wantOrder))
	}
	for p, cp := range exp.Checkpoints {
		if got, ok, err := tb.Checkpoint(ctx, p); err != nil || !ok || got != cp {
			t.Errorf("Checkpoint(%d) = %d, %v, %v; want %d", p, got, ok, err, cp)
		}
		if got := s.client.Get(ctx, tb.keys.batch(p)).Val(); got != exp.Batches[p] {
			t.Errorf("batch token of partition %d = %q, want %q", p, got, exp.Batches[p])
		}
	}
	for p, e := range exp.Epochs {
		if got := s.client.Get(ctx, tb.keys.epoch(p)).Val(); got != strconv.FormatInt(e, 10) {
			t.Errorf("epoch of partition %d = %q, want %d", p, got, e)
		}
	}
	iter := s.client.Scan(ctx, 0, s.keys.pattern(), 1000).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); !strings.HasPrefix(k, s.keys.prefix+tablesNamespace) && k != exp.StreamKey {
			t.Errorf("key %s of the movie layout left", k)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateMovieLayout opens the movie table on a database written by
// the movie layout: every movie, checkpoint, batch token and epoch is
// kept, the old keys are gone, a claim fences every earlier writer and
// the table's stream continues the old one.
func TestMigrateMovieLayout(t *testing.T) {
	r := testkit.StartRedis(t)
	s, exp := loadFixture(t, r)
	ctx := ctxT(t)
	streamLen := s.client.XLen(ctx, exp.StreamKey).Val()
	tb := openTable(t, s, movieTableSpec)
	checkMigrated(t, s, tb, exp)
	if got := s.client.Exists(ctx, tb.keys.migrating()).Val(); got != 0 {
		t.Errorf("migration lock left")
	}

	// Opening it again (another instance) changes nothing.
	again := openTable(t, openFixtureStore(t, r, exp), movieTableSpec)
	checkMigrated(t, s, again, exp)

	for p, e := range exp.Epochs {
		got, err := tb.Claim(ctx, p)
		if err != nil || got <= e {
			t.Errorf("Claim(%d) = %d, %v; want an epoch above %d", p, got, err, e)
		}
	}
	// An old writer with the last epoch of the movie layout is refused.
	m := movieDoc(exp.Movies[0].ID, exp.Movies[0].Partition, 1, 1, 1<<40)
	err := tb.Apply(ctx, engine.DocBatch{Partition: m.Partition, Epoch: exp.Epochs[m.Partition], Docs: []engine.Doc{m}, Checkpoint: 1 << 40})
	if !errors.Is(err, engine.ErrFenced) {
		t.Errorf("Apply with an epoch of the movie layout = %v, want ErrFenced", err)
	}
	tapply(t, tb, m.Partition, 1<<40, m)
	if got := s.client.XLen(ctx, exp.StreamKey).Val(); got != streamLen+1 {
		t.Errorf("stream length after an Apply = %d, want %d", got, streamLen+1)
	}
	last := s.client.XRevRangeN(ctx, exp.StreamKey, "+", "-", 1).Val()
	wantFields := map[string]any{"movieId": strconv.FormatInt(exp.Movies[0].ID, 10), "avg": "1", "count": "1"}
	if len(last) != 1 || !maps.Equal(last[0].Values, wantFields) {
		t.Errorf("last stream entry = %v, want %v", last, wantFields)
	}
}

// errCrash stands for a process that dies in the middle of a migration.
var errCrash = errors.New("crash")

// TestMigrateCrash stops a migration after a step, leaves its lock behind
// as a dead process would, and opens the table again: the new open waits
// for the lock to expire and completes the migration.
func TestMigrateCrash(t *testing.T) {
	for _, bc := range []struct {
		step  string
		after int
	}{
		{"partition", 2},
		{"movies", 1},
		{"movies", 7},
		{"finish", 1},
	} {
		t.Run(bc.step+"/"+strconv.Itoa(bc.after), func(t *testing.T) {
			r := testkit.StartRedis(t)
			s, exp := loadFixture(t, r)
			ctx := ctxT(t)
			seen := 0
			s.migrateChunk = 200
			s.migrateHook = func(step string) error {
				if step == bc.step {
					if seen++; seen == bc.after {
						return errCrash
					}
				}
				return nil
			}
			if _, err := s.OpenTable(ctx, movieTableSpec); !errors.Is(err, errCrash) {
				t.Fatalf("OpenTable = %v, want the crash", err)
			}
			lock := s.keys.table(MovieTableName).migrating()
			if err := s.client.Set(ctx, lock, "dead instance", 300*time.Millisecond).Err(); err != nil {
				t.Fatal(err)
			}
			if bc.step == "movies" {
				left := s.client.Exists(ctx, exp.Prefix+"by-avg").Val()
				if left != 1 {
					t.Errorf("by-avg gone after a crash midway, want it kept")
				}
			}
			s2 := openFixtureStore(t, r, exp)
			checkMigrated(t, s2, openTable(t, s2, movieTableSpec), exp)
		})
	}
}

// TestMigrateConcurrent opens the movie table from several stores at once,
// with locks that expire between the steps, so that several migrate at
// the same time: every movie still arrives exactly once.
func TestMigrateConcurrent(t *testing.T) {
	r := testkit.StartRedis(t)
	_, exp := loadFixture(t, r)
	const n = 4
	stores := make([]*Store, n)
	var ran [n]atomic.Int64 // steps each store ran
	tookOver := make(chan struct{})
	var once sync.Once
	var stalled atomic.Int32
	stalled.Store(-1)
	for i := range stores {
		stores[i] = openFixtureStore(t, r, exp)
		stores[i].migrateChunk = 20 + 10*i
		stores[i].migrateTTL = time.Millisecond // expires between steps: the others take over
		stores[i].migrateHook = func(string) error {
			if ran[i].Add(1) == 3 && stalled.CompareAndSwap(-1, int32(i)) {
				// The first store at its third step stalls until another
				// store has taken the migration over, then carries on at
				// the same time.
				select {
				case <-tookOver:
				case <-time.After(20 * time.Second):
					return errors.New("no store took the migration over")
				}
			} else if st := stalled.Load(); st >= 0 && st != int32(i) {
				once.Do(func() { close(tookOver) })
			}
			return nil
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	tables := make([]engine.Table, n)
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tables[i], errs[i] = s.OpenTable(ctxT(t), movieTableSpec)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("OpenTable %d: %v", i, err)
		}
		checkMigrated(t, stores[i], tables[i].(*table), exp)
	}
	migrated := 0
	for i := range ran {
		if ran[i].Load() > 0 {
			migrated++
		}
	}
	if migrated < 2 {
		t.Errorf("%d stores ran migration steps, want several at once", migrated)
	}
	checkMigrated(t, stores[0], openTable(t, openFixtureStore(t, r, exp), movieTableSpec), exp)
}

// TestMigrateNothing opens the movie table on an empty prefix, and a table
// of another spec on the movie layout, which stays as it is.
func TestMigrateNothing(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r)
	tb := openTable(t, s, movieTableSpec)
	if got := s.client.Exists(ctxT(t), tb.keys.migrated()).Val(); got != 1 {
		t.Errorf("marker after opening an empty prefix = %d, want 1", got)
	}
	ls, exp := loadFixture(t, r)
	other := movieTableSpec
	other.TiesAscending = false
	other.Name = "movies2"
	openTable(t, ls, other)
	if got := ls.client.Exists(ctxT(t), exp.Prefix+"by-avg").Val(); got != 1 {
		t.Errorf("by-avg gone after opening another table, want it kept")
	}
}

// TestMigrateCorrupt opens the movie table on a movie layout with a movie
// it cannot read: OpenTable fails naming the key, releases its lock, and
// leaves the table unmarked so that a later open tries again.
func TestMigrateCorrupt(t *testing.T) {
	for _, bc := range []struct {
		name  string
		field string
		value string
	}{
		{"count", "count", "many"},
		{"sum", "sum", "1.2.3"},
		{"partition", "partition", "99999999999"},
		{"version", "version", ""},
		{"sources", "sources", "0-1"},
	} {
		t.Run(bc.name, func(t *testing.T) {
			r := testkit.StartRedis(t)
			s, exp := loadFixture(t, r)
			ctx := ctxT(t)
			mk := exp.Prefix + "movie:" + strconv.FormatInt(exp.Movies[10].ID, 10)
			if err := s.client.HSet(ctx, mk, bc.field, bc.value).Err(); err != nil {
				t.Fatal(err)
			}
			_, err := s.OpenTable(ctx, movieTableSpec)
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("OpenTable = %v, want errCorrupt", err)
			}
			if !bytes.Contains([]byte(err.Error()), []byte(mk)) {
				t.Errorf("error %q does not name %s", err, mk)
			}
			tk := s.keys.table(MovieTableName)
			if got := s.client.Exists(ctx, tk.migrating(), tk.migrated()).Val(); got != 0 {
				t.Errorf("%d of the lock and marker exist after a failed migration, want 0", got)
			}
		})
	}
}
