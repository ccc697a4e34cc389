package docstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/keepstate/keepstate/engine"
)

// This file writes data in the movie layout with the movie Store API (the
// code the migration replaces): the fixture of migrate_test.go and the
// store of the 1M measurement. It goes when that API goes; the tests that
// read what it wrote do not call it.

// TestWriteMigrationFixture writes the fixture testdata/movielayout-v3
// (store/ and expected.json) with the movie Store API when
// KEEPSTATE_WRITE_FIXTURE=1: fixtureMovies movies over 3 partitions, in
// two rounds of batches (a third of them updated in the second), each
// partition claimed more than once, and the table "orders" (a number and
// a string index) over 2 partitions.
func TestWriteMigrationFixture(t *testing.T) {
	if os.Getenv("KEEPSTATE_WRITE_FIXTURE") != "1" {
		t.Skip("set KEEPSTATE_WRITE_FIXTURE=1 to write testdata/" + fixtureName)
	}
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := fixture{Checkpoints: map[int32]int64{}, Epochs: map[int32]int64{},
		Orders: fixtureTable{Checkpoints: map[int32]int64{}, Epochs: map[int32]int64{}}}
	const parts = 3
	claims := map[int32]int{0: 3, 1: 2, 2: 4}
	for p := range int32(parts) {
		for range claims[p] {
			if want.Epochs[p], err = s.Claim(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	movies := map[int64]engine.MovieStats{}
	offset := map[int32]int64{}
	write := func(round int64, ids []int64) {
		byPart := map[int32][]engine.MovieStats{}
		for _, id := range ids {
			m := fixtureMovie(id, round)
			byPart[m.Partition] = append(byPart[m.Partition], m)
		}
		for p, docs := range byPart {
			for start := 0; start < len(docs); start += 500 {
				batch := docs[start:min(start+500, len(docs))]
				offset[p] += int64(len(batch))
				err := s.Apply(ctx, engine.Batch{Partition: p, Epoch: want.Epochs[p], Docs: batch, Checkpoint: offset[p]})
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range batch {
					movies[m.MovieID] = m
				}
				want.Checkpoints[p] = offset[p]
			}
		}
	}
	var all, some []int64
	for i := range int64(fixtureMovies) {
		id := i*7 + 1
		if i%250 == 0 {
			id = -id // negative ids sort after the others as table keys
		}
		all = append(all, id)
		if i%3 == 0 {
			some = append(some, id)
		}
	}
	write(1, all)
	write(2, some)

	orders, err := s.OpenTable(ctx, fixtureOrdersSpec)
	if err != nil {
		t.Fatal(err)
	}
	for p, n := range map[int32]int{0: 2, 1: 1} {
		for range n {
			if want.Orders.Epochs[p], err = orders.Claim(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	for p := range int32(2) {
		var docs []engine.Doc
		for i := range 120 {
			if int32(i%2) == p {
				docs = append(docs, orderDoc(i, p, int64(i+1)))
			}
		}
		want.Orders.Checkpoints[p] = int64(len(docs))
		if err := orders.Apply(ctx, engine.DocBatch{Partition: p, Epoch: want.Orders.Epochs[p], Docs: docs, Checkpoint: int64(len(docs))}); err != nil {
			t.Fatal(err)
		}
		want.Orders.Docs = append(want.Orders.Docs, docs...)
	}
	for _, id := range all {
		m := movies[id]
		got, err := s.Get(ctx, id)
		if err != nil || !sameMovie(got, m) {
			t.Fatalf("movie %d reads back as %+v, %v; wrote %+v", id, got, err, m)
		}
		want.Movies = append(want.Movies, fixtureMovieJSON{ID: m.MovieID, Partition: m.Partition, Count: m.Count,
			Sum: m.Sum, Version: m.Version, Sources: m.Sources})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join("testdata", fixtureName)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if err := compactStore(filepath.Join(dir, storeDir), filepath.Join(out, storeDir)); err != nil {
		t.Fatal(err)
	}
	want.Written = time.Now().UTC().Format(time.RFC3339)
	var raw bytes.Buffer // one movie a line: diffable, and a third of the indented size
	raw.WriteString("{\"written\": \"" + want.Written + "\",\n")
	for _, part := range []struct {
		name string
		v    any
	}{{"checkpoints", want.Checkpoints}, {"epochs", want.Epochs}, {"orders", want.Orders}} {
		line, err := json.Marshal(part.v)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&raw, "%q: %s,\n", part.name, line)
	}
	raw.WriteString("\"movies\": [\n")
	for i, m := range want.Movies {
		line, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		raw.Write(line)
		if i < len(want.Movies)-1 {
			raw.WriteByte(',')
		}
		raw.WriteByte('\n')
	}
	raw.WriteString("]}\n")
	if err := os.WriteFile(filepath.Join(out, "expected.json"), raw.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: %d movies, %d orders, %d bytes of store", out, len(want.Movies), len(want.Orders.Docs), diskBytes(filepath.Join(out, storeDir)))
}

// compactStore copies every key and value of the Pebble store src, as
// written, into a new Pebble store dst as one zstd-compressed table
// (ingested, so dst has no write-ahead log to replay): a store of the
// same contents, a fifth of the size of src (uncompressed tables, a
// write-ahead log per memtable).
func compactStore(src, dst string) error {
	in, err := pebble.Open(src, &pebble.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer in.Close()
	it, err := in.NewIter(nil)
	if err != nil {
		return err
	}
	var entries []kvEntry
	for ok := it.First(); ok; ok = it.Next() {
		entries = append(entries, kvEntry{key: bytes.Clone(it.Key()), value: bytes.Clone(it.Value())})
	}
	if err := it.Close(); err != nil {
		return err
	}
	opts := &pebble.Options{}
	for i := range opts.Levels {
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.ZstdCompression }
	}
	opts.EnsureDefaults()
	out, err := pebble.Open(dst, opts)
	if err != nil {
		return err
	}
	p := &pebbleKV{db: out, opts: opts, tmp: dst + ingestDirSuffix}
	err = p.ingest([][]kvEntry{entries})
	if rerr := os.RemoveAll(p.tmp); err == nil {
		err = rerr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// fixtureMovie is movie id in round: 1..40 ratings on a half-star grid
// (sums of halves, so many averages tie), sources from two partitions.
func fixtureMovie(id, round int64) engine.MovieStats {
	h := uint64(id)*0x9E3779B97F4A7C15 + uint64(round)*0xBF58476D1CE4E5B9
	h ^= h >> 29
	count := int64(h%40) + 1
	halves := int64(h>>8) % (10*count + 1)
	p := int32(((id % 3) + 3) % 3)
	return engine.MovieStats{MovieID: id, Partition: p, Count: count, Sum: float64(halves) / 2, Version: 100*round + int64(h%97),
		Sources: map[int32]int64{p: 1000*round + int64(h%1000), (p + 1) % 3: round}}
}

// fixtureMovieStore writes n movies over 3 partitions into a new store in
// dir with the movie Store API (replay batches, the restore path) and
// closes it.
func fixtureMovieStore(tb testing.TB, dir string, n int) {
	tb.Helper()
	ctx := context.Background()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		tb.Fatal(err)
	}
	const batch = 4096
	var epochs [3]int64
	for p := range int32(3) {
		if epochs[p], err = s.Claim(ctx, p); err != nil {
			tb.Fatal(err)
		}
	}
	docs := make([][]engine.MovieStats, 3)
	var next [3]int64
	flush := func(p int32) {
		next[p] += int64(len(docs[p]))
		if err := s.Apply(ctx, engine.Batch{Partition: p, Epoch: epochs[p], Docs: docs[p], Checkpoint: next[p], Replay: true}); err != nil {
			tb.Fatal(err)
		}
		docs[p] = docs[p][:0]
	}
	for id := range int64(n) {
		m := fixtureMovie(id+1, 1)
		docs[m.Partition] = append(docs[m.Partition], m)
		if len(docs[m.Partition]) == batch {
			flush(m.Partition)
		}
	}
	for p := range int32(3) {
		if len(docs[p]) > 0 {
			flush(p)
		}
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
}

// TestMigrateMeasure measures the migration of KEEPSTATE_MIGRATE_MOVIES
// movies (1000000 for the figure in the migration's commit), written with
// the movie Store API; skipped without it. It logs the time of the Open
// that migrates, and of a plain Open for comparison.
func TestMigrateMeasure(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("KEEPSTATE_MIGRATE_MOVIES"))
	if err != nil || n <= 0 {
		t.Skip("set KEEPSTATE_MIGRATE_MOVIES to a number of movies to measure the migration")
	}
	dir := t.TempDir()
	start := time.Now()
	fixtureMovieStore(t, dir, n)
	t.Logf("wrote %d movies in the movie layout in %v: %d MB on disk", n, time.Since(start).Round(time.Millisecond), diskBytes(dir)>>20)
	start = time.Now()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	plain := time.Since(start)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	start, cpu := time.Now(), cpuTime()
	s, err = Open(dir, WithMovieMigration(true), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	took, cpuTook := time.Since(start), cpuTime()-cpu
	defer s.Close()
	t.Logf("plain Open %v; migrating Open %v (%v CPU), %d MB on disk after; log:\n%s",
		plain.Round(time.Millisecond), took.Round(time.Millisecond), cpuTook.Round(time.Millisecond), diskBytes(dir)>>20, logs.String())
	tb, err := s.OpenTable(context.Background(), movieTableSpec)
	if err != nil {
		t.Fatal(err)
	}
	page, err := tb.Query(context.Background(), engine.IndexQuery{Index: "avg", Desc: true, Limit: 3})
	if err != nil || len(page.Docs) != 3 {
		t.Fatalf("query after the migration = %+v, %v", page, err)
	}
	for _, id := range []int64{1, int64(n / 2), int64(n)} {
		want := fixtureMovie(id, 1)
		doc, err := tb.Get(context.Background(), binary.BigEndian.AppendUint64(nil, uint64(id)))
		if err != nil || doc.Version != want.Version || doc.Partition != want.Partition {
			t.Fatalf("movie %d after the migration = %+v, %v; want %+v", id, doc, err, want)
		}
	}
}
