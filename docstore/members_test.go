package docstore

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestUpdateWritesOnlyWhatChanged checks the keys an Apply writes per
// movie: a new movie its document, rank entry and members key; an update
// its document, plus the rank entry's move when the average changed, plus
// the members key's move when the partition changed. Every key costs
// compaction CPU later (docs/benchmarks.md), so this pins the count; the
// index must agree with the documents after each.
func TestUpdateWritesOnlyWhatChanged(t *testing.T) {
	var c *faultKV
	s := openTemp(t, WithFsync(false), withFaultKV(&c))
	defer s.Close()
	ctx := context.Background()
	movie := func(p int32, version, count int64, sum float64) engine.MovieStats {
		return engine.MovieStats{MovieID: 42, Partition: p, Count: count, Sum: sum, Version: version, Sources: map[int32]int64{0: version}}
	}
	cases := []struct {
		name   string
		m      engine.MovieStats
		want   int64 // keys written, the checkpoint and collection size included
		replay bool
	}{
		{"new movie", movie(0, 1, 1, 8), 3 + 1 + 1, false},                    // doc, rank, members; checkpoint, size
		{"update, average changed", movie(0, 2, 2, 10), 3 + 1, false},         // doc, rank del + set; checkpoint
		{"update, same average", movie(0, 3, 4, 20), 1 + 1, false},            // doc; checkpoint
		{"move, same average", movie(1, 4, 8, 40), 3 + 1, false},              // doc, members del + set; checkpoint
		{"move, average changed", movie(2, 5, 9, 50), 5 + 1, false},           // doc, rank del + set, members del + set; checkpoint
		{"replayed older version", movie(2, 5, 10, 60), 1, true},              // checkpoint only
		{"update after the moves", movie(2, 6, 10, 70), 3 + 1, false},         // doc, rank del + set; checkpoint
		{"update, same average again", movie(2, 7, 20, 140), 1 + 1, false},    // doc; checkpoint
		{"back to the first partition", movie(0, 8, 20, 140), 3 + 1, false},   // doc, members del + set; checkpoint
		{"average changed in it again", movie(0, 9, 21, 141.5), 3 + 1, false}, // doc, rank del + set; checkpoint
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			epoch, err := s.Claim(ctx, tc.m.Partition)
			if err != nil {
				t.Fatal(err)
			}
			before := c.writes.Load()
			b := engine.Batch{Partition: tc.m.Partition, Epoch: epoch, Docs: []engine.MovieStats{tc.m}, Checkpoint: int64(i + 1), Replay: tc.replay}
			if err := s.Apply(ctx, b); err != nil {
				t.Fatal(err)
			}
			if got := c.writes.Load() - before; got != tc.want {
				t.Errorf("Apply wrote %d keys; want %d", got, tc.want)
			}
			if err := checkIndexAgrees(s); err != nil {
				t.Fatal(err)
			}
			for p := range int32(3) {
				n := 0
				if err := s.ScanPartition(ctx, p, func(engine.MovieStats) error { n++; return nil }); err != nil {
					t.Fatal(err)
				}
				if want := map[bool]int{true: 1}[p == tc.m.Partition]; n != want {
					t.Errorf("partition %d scans %d movies; want %d", p, n, want)
				}
			}
		})
	}
}

// writeVersion writes the given version of movies 1..n (partition id%2),
// with an average that differs from the version before.
func writeVersion(t *testing.T, s *Store, n int, version int64) []engine.MovieStats {
	t.Helper()
	ctx := context.Background()
	var out []engine.MovieStats
	for p := range int32(2) {
		epoch, err := s.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var docs []engine.MovieStats
		for id := int64(1); id <= int64(n); id++ {
			if int32(id%2) != p {
				continue
			}
			m := engine.MovieStats{MovieID: id, Partition: p, Count: version, Sum: float64(id%7+version) * float64(version),
				Version: version, Sources: map[int32]int64{p: version}}
			docs = append(docs, m)
		}
		if err := s.Apply(ctx, engine.Batch{Partition: p, Epoch: epoch, Docs: docs, Checkpoint: version}); err != nil {
			t.Fatal(err)
		}
		out = append(out, docs...)
	}
	return out
}

// TestDropAndWarmReadTheDocuments checks the two readers of what members
// keys no longer hold. After every movie was updated (new averages, same
// partitions, so the members keys were not rewritten): the write cache
// filled at Open holds each movie's current version and average, and a
// drop removes the current rank entries, whether the write cache knows
// the movies or not.
func TestDropAndWarmReadTheDocuments(t *testing.T) {
	const n = 2*dropChunk + 500 // a partition of more than one drop chunk
	for _, known := range []bool{true, false} {
		t.Run(map[bool]string{true: "write cache knows the movies", false: "write cache empty"}[known], func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, WithFsync(false))
			if err != nil {
				t.Fatal(err)
			}
			writeVersion(t, s, n, 1)
			want := writeVersion(t, s, n, 2)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(dir, WithFsync(false)); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			<-s.Warmed()
			s.wmu.Lock()
			for _, m := range want {
				if p, ok := s.priors.get(m.MovieID); !ok || p.version != 2 || p.avg() != m.Avg() || p.part != m.Partition {
					s.wmu.Unlock()
					t.Fatalf("write cache after Open: movie %d = %+v, %v; want version 2, average %v, partition %d", m.MovieID, p, ok, m.Avg(), m.Partition)
				}
			}
			if !known {
				s.priors.clear()
			}
			s.wmu.Unlock()
			ctx := context.Background()
			if err := s.DropPartition(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if err := checkIndexAgrees(s); err != nil {
				t.Fatal(err)
			}
			raw, err := s.rawCounts()
			if err != nil {
				t.Fatal(err)
			}
			if raw.docs != n/2 || raw.rankEntries != n/2 || raw.members != n/2 {
				t.Fatalf("after dropping partition 0: %+v; want %d documents, rank entries and members", raw, n/2)
			}
			// The kept partition's movies write without reading when the
			// cache knew their current state; the dropped ones are read
			// (found absent), and so is everything after the cache emptied.
			reads := s.counts.writeReads.Load()
			writeVersion(t, s, n, 3)
			wantReads := map[bool]int64{true: n / 2, false: n}[known]
			if r := s.counts.writeReads.Load() - reads; r != wantReads {
				t.Errorf("version 3 read %d documents; want %d", r, wantReads)
			}
			if err := checkIndexAgrees(s); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOpenUpgradesV2Store checks the format marker's upgrade: a v2 store
// (members values holding an average and a version) opens, gets the v3
// marker (so a v2 binary refuses it from now on), and its members values
// are ignored, even wrong ones; a store of an unknown format is refused.
func TestOpenUpgradesV2Store(t *testing.T) {
	const n = 100
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	want := writeVersion(t, s, n, 1)
	setRaw := func(s *Store, k, v []byte) {
		t.Helper()
		b := s.kv.batch()
		defer b.release()
		if err := b.set(k, v); err != nil {
			t.Fatal(err)
		}
		if err := b.commit(true); err != nil {
			t.Fatal(err)
		}
	}
	// What a v2 binary wrote, with values that no longer hold.
	for _, m := range want {
		v := binary.BigEndian.AppendUint64(nil, math.Float64bits(m.Avg()+100))
		setRaw(s, memberKey(m.Partition, m.MovieID), binary.BigEndian.AppendUint64(v, 99))
	}
	setRaw(s, formatKey, []byte(formatVersionV2))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	if s, err = Open(dir, WithFsync(false)); err != nil {
		t.Fatalf("Open of a v2 store: %v", err)
	}
	<-s.Warmed()
	var marker []byte
	if err := s.read(ctx, func(r kvReader) error {
		var err error
		marker, err = r.get(formatKey)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if string(marker) != formatVersion {
		t.Fatalf("marker after Open = %q; want %q", marker, formatVersion)
	}
	want = writeVersion(t, s, n, 2)
	if err := s.DropPartition(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatal(err)
	}
	for _, m := range want {
		got, err := s.Get(ctx, m.MovieID)
		switch {
		case m.Partition == 1 && !errors.Is(err, engine.ErrNotFound):
			t.Fatalf("Get(%d) of the dropped partition = %+v, %v; want ErrNotFound", m.MovieID, got, err)
		case m.Partition == 0 && (err != nil || got.Version != 2 || got.Avg() != m.Avg()):
			t.Fatalf("Get(%d) = %+v, %v; want version 2, average %v", m.MovieID, got, err, m.Avg())
		}
	}
	setRaw(s, formatKey, []byte("keepstate-docstore v9 (from the future)"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, WithFsync(false)); !errors.Is(err, ErrNotStore) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("Open of an unknown format = %v; want ErrNotStore", err)
	}
}
