package docstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// oldMovie is movie id of TestMigrateMeasure: 1..40 ratings on a
// half-star grid, sources from two partitions.
type oldMovie struct {
	id, count, version int64
	part               int32
	sum                float64
	sources            map[int32]int64
}

func measureMovie(id int64) oldMovie {
	h := uint64(id)*0x9E3779B97F4A7C15 + 0xBF58476D1CE4E5B9
	h ^= h >> 29
	count := int64(h%40) + 1
	p := int32(id % 3)
	return oldMovie{id: id, count: count, part: p, sum: float64(int64(h>>8)%(10*count+1)) / 2, version: 100 + int64(h%97),
		sources: map[int32]int64{p: 1000 + int64(h%1000), (p + 1) % 3: 1}}
}

// oldDocID is the movie layout's _id of a movie: a UUID whose first 16 hex
// digits are the id offset by the sign bit.
func oldDocID(id int64) []byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(id)^signBit)
	h := hex.EncodeToString(b[:])
	return []byte(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
}

// encodeOldMovie returns m's document as the movie layout stored it (the
// map decodeOldMovie reads).
func encodeOldMovie(m oldMovie) []byte {
	avg := m.sum / float64(m.count)
	float := func(b []byte, f float64) []byte {
		return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(f))
	}
	var rank [16]byte
	binary.BigEndian.PutUint64(rank[:8], ^orderedFloat(avg))
	binary.BigEndian.PutUint64(rank[8:], uint64(m.id)^signBit)
	b := mpMapLen(nil, 9)
	b = mpStr(mpStr(b, "_id"), string(oldDocID(m.id)))
	b = mpInt64(mpStr(b, "movieId"), m.id)
	b = mpInt64(mpStr(b, "partition"), int64(m.part))
	b = mpInt64(mpStr(b, "count"), m.count)
	b = float(mpStr(b, "sum"), m.sum)
	b = float(mpStr(b, "avg"), avg)
	b = mpInt64(mpStr(b, "version"), m.version)
	b = mpStr(mpStr(b, "rank"), hex.EncodeToString(rank[:]))
	b = mpMapLen(mpStr(b, "sources"), len(m.sources))
	for p, off := range m.sources {
		b = mpInt64(mpStr(b, strconv.Itoa(int(p))), off)
	}
	return b
}

// writeOldLayout writes movies 1..n in the movie layout into a new store
// in dir, straight into its keys, as migrate.go reads them: documents,
// members keys, three partitions' checkpoints and claim epochs, and the
// collection's metadata (the rank index's entries, which the migration
// only range-deletes, are left out).
func writeOldLayout(tb testing.TB, dir string, n int) {
	tb.Helper()
	s, err := Open(dir, WithFsync(false)) // the format marker
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	db, err := openPebble(filepath.Join(dir, storeDir), defaults(), slog.New(slog.DiscardHandler), true)
	if err != nil {
		tb.Fatal(err)
	}
	b := db.writeBatch(0)
	commit := func() {
		if err := b.commit(false); err != nil {
			tb.Fatal(err)
		}
		b.release()
		b = db.writeBatch(0)
	}
	set := func(k, v []byte) {
		if err := b.set(k, v); err != nil {
			tb.Fatal(err)
		}
	}
	for id := int64(1); id <= int64(n); id++ {
		m := measureMovie(id)
		set(append(bytes.Clone(oldDocs), oldDocID(id)...), encodeOldMovie(m))
		set(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32([]byte{oldMembers}, uint32(m.part)), uint64(id)^signBit), nil)
		if id%8192 == 0 {
			commit()
		}
	}
	for p := range uint32(3) {
		set(binary.BigEndian.AppendUint32([]byte{oldCheckpoints}, p), int64Value(int64(n)))
		set(binary.BigEndian.AppendUint32([]byte{oldEpochs}, p), int64Value(3))
	}
	set(oldCollKey, fmt.Appendf(nil, `{"Size":%d}`, n))
	if err := b.commit(true); err != nil {
		tb.Fatal(err)
	}
	b.release()
	if err := db.close(true); err != nil {
		tb.Fatal(err)
	}
}

// TestMigrateMeasure measures the migration of KEEPSTATE_MIGRATE_MOVIES
// movies written in the movie layout (writeOldLayout); skipped without
// it. It logs the time of the Open that migrates (at 1000000 movies on 2
// cores: 11.7 s, 7.6 s of CPU), then checks a few movies.
func TestMigrateMeasure(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("KEEPSTATE_MIGRATE_MOVIES"))
	if err != nil || n <= 0 {
		t.Skip("set KEEPSTATE_MIGRATE_MOVIES to a number of movies to measure the migration")
	}
	ctx := context.Background()
	dir := t.TempDir()
	start := time.Now()
	writeOldLayout(t, dir, n)
	t.Logf("wrote %d movies in the movie layout in %v: %d MB on disk", n, time.Since(start).Round(time.Millisecond), diskBytes(dir)>>20)
	var logs bytes.Buffer
	start, cpu := time.Now(), cpuTime()
	s, err := Open(dir, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	took, cpuTook := time.Since(start), cpuTime()-cpu
	defer s.Close()
	t.Logf("migrating Open %v (%v CPU), %d MB on disk after; log:\n%s",
		took.Round(time.Millisecond), cpuTook.Round(time.Millisecond), diskBytes(dir)>>20, logs.String())
	tb := mustTable(t, s, movieTableSpec)
	page, err := tb.Query(ctx, engine.IndexQuery{Index: "avg", Desc: true, Limit: 3})
	if err != nil || len(page.Docs) != 3 {
		t.Fatalf("query after the migration = %+v, %v", page, err)
	}
	for _, id := range []int64{1, int64(n / 2), int64(n)} {
		m := measureMovie(id)
		want := engine.Doc{Key: binary.BigEndian.AppendUint64(nil, uint64(id)), Partition: m.part, Version: m.version, Sources: m.sources,
			Value: binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(m.count)), math.Float64bits(m.sum)),
			Index: []engine.IndexValue{engine.Num(m.sum / float64(m.count))}}
		if got, err := tb.Get(ctx, want.Key); err != nil || !sameTableDoc(got, want) {
			t.Fatalf("movie %d after the migration = %+v, %v; want %+v", id, got, err, want)
		}
	}
	if next, ok, err := tb.Checkpoint(ctx, 2); err != nil || !ok || next != int64(n) {
		t.Fatalf("Checkpoint(2) after the migration = %d, %v, %v; want %d", next, ok, err, n)
	}
}
