package redisstore

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

func TestKeyLayout(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r, WithPrefix("app1:"))
	m := engine.MovieStats{MovieID: 362, Partition: 2, Count: 2, Sum: 18, Version: 7, Sources: map[int32]int64{1: 4, 0: 11}}
	apply(t, s, 2, 8, m)

	types := map[string]string{
		"app1:movie:362":                "hash",
		"app1:by-avg":                   "zset",
		"app1:partition:2:members":      "set",
		"app1:partition:2:checkpoint":   "string",
		"app1:partition:2:epoch":        "string",
		"app1:rating-averages-stream":   "stream",
		"app1:partition:2:batch":        "string",
		"keepstate:by-avg":              "none",
		"app1:partition:0:checkpoint":   "none",
		"app1:movie:362:does-not-exist": "none",
	}
	for key, want := range types {
		if got := redisCmd(t, r, "TYPE", key); got != want {
			t.Errorf("TYPE %s = %s, want %s", key, got, want)
		}
	}
	fields := map[string]string{"id": "362", "count": "2", "sum": "18", "avg": "9", "partition": "2",
		"version": "7", "sources": "0:11,1:4", "rank": rank(9, 362)}
	for f, want := range fields {
		if got := redisCmd(t, r, "HGET", "app1:movie:362", f); got != want {
			t.Errorf("HGET movie %s = %q, want %q", f, got, want)
		}
	}
	if got := redisCmd(t, r, "GET", "app1:partition:2:checkpoint"); got != "8" {
		t.Errorf("checkpoint key = %q, want 8", got)
	}
	if got := redisCmd(t, r, "SISMEMBER", "app1:partition:2:members", "362"); got != "1" {
		t.Errorf("SISMEMBER members 362 = %s, want 1", got)
	}
	if got := redisCmd(t, r, "ZSCORE", "app1:by-avg", rank(9, 362)); got != "0" {
		t.Errorf("ZSCORE by-avg rank = %q, want 0", got)
	}

	// A new average moves the movie's by-avg member instead of adding one.
	m2 := m.Clone()
	m2.Count, m2.Sum, m2.Version = 4, 20, 9
	apply(t, s, 2, 10, m2)
	if got := redisCmd(t, r, "ZCARD", "app1:by-avg"); got != "1" {
		t.Errorf("ZCARD by-avg after an update = %s, want 1", got)
	}
	if got := redisCmd(t, r, "ZSCORE", "app1:by-avg", rank(5, 362)); got != "0" {
		t.Errorf("ZSCORE of the new rank = %q, want 0", got)
	}
}

func TestApplyRefusedWritesNothing(t *testing.T) {
	r := testkit.StartRedis(t)
	tests := []struct {
		name    string
		prepare func(t *testing.T, s *Store) engine.Batch
		want    error // nil: some other (non-sentinel) error
	}{
		{"stale version", func(t *testing.T, s *Store) engine.Batch {
			e, _ := s.Claim(ctxT(t), 0)
			return engine.Batch{Partition: 0, Epoch: e, Checkpoint: 50,
				Docs: []engine.MovieStats{movie(10, 0, 1, 5, 1), movie(1, 0, 9, 9, 5)}}
		}, engine.ErrFenced},
		{"old epoch", func(t *testing.T, s *Store) engine.Batch {
			e, _ := s.Claim(ctxT(t), 0)
			_, _ = s.Claim(ctxT(t), 0)
			return engine.Batch{Partition: 0, Epoch: e, Checkpoint: 50, Docs: []engine.MovieStats{movie(10, 0, 1, 5, 1)}}
		}, engine.ErrFenced},
		{"NaN sum", func(t *testing.T, s *Store) engine.Batch {
			return engine.Batch{Partition: 0, Checkpoint: 50,
				Docs: []engine.MovieStats{movie(10, 0, 1, 5, 1), movie(11, 0, 1, math.NaN(), 1)}}
		}, engine.ErrInvalid},
		{"zero count", func(t *testing.T, s *Store) engine.Batch {
			return engine.Batch{Partition: 0, Checkpoint: 50,
				Docs: []engine.MovieStats{movie(10, 0, 1, 5, 1), movie(11, 0, 0, 0, 1)}}
		}, engine.ErrInvalid},
		{"document of another partition", func(t *testing.T, s *Store) engine.Batch {
			return engine.Batch{Partition: 0, Checkpoint: 50,
				Docs: []engine.MovieStats{movie(10, 0, 1, 5, 1), movie(11, 1, 1, 5, 1)}}
		}, engine.ErrInvalid},
		{"document key of another type", func(t *testing.T, s *Store) engine.Batch {
			// Another program wrote a plain string where a movie's hash
			// lives: the read of the stored version fails, and nothing is
			// written (no panic on the empty reply either).
			redisCmd(t, r, "SET", s.keys.movie(11), "not a hash")
			// No token yet, as before a partition's first batch: the absent
			// token is the pipeline's first "error", ahead of the failed read.
			redisCmd(t, r, "DEL", s.keys.batch(0))
			e, _ := s.Claim(ctxT(t), 0)
			return engine.Batch{Partition: 0, Epoch: e, Checkpoint: 50,
				Docs: []engine.MovieStats{movie(10, 0, 1, 5, 1), movie(11, 0, 1, 5, 1)}}
		}, nil},
		{"wrong key type found before the first write", func(t *testing.T, s *Store) engine.Batch {
			// Another program wrote a plain string where the stream lives: Apply
			// must notice before its first write.
			redisCmd(t, r, "SET", s.keys.stream(), "not a stream")
			e, _ := s.Claim(ctxT(t), 0)
			return engine.Batch{Partition: 0, Epoch: e, Checkpoint: 50, Docs: []engine.MovieStats{movie(10, 0, 1, 5, 1)}}
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, r)
			apply(t, s, 0, 5, movie(1, 0, 2, 10, 5))
			streamLen := redisCmd(t, r, "XLEN", s.keys.stream())
			b := tc.prepare(t, s)
			err := s.Apply(ctxT(t), b)
			if err == nil {
				t.Fatal("Apply: got nil error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Apply = %v; want %v", err, tc.want)
			}
			for _, sentinel := range []error{engine.ErrFenced, engine.ErrInvalid, engine.ErrUnavailable, engine.ErrNotFound} {
				if sentinel != tc.want && errors.Is(err, sentinel) {
					t.Fatalf("Apply = %v; must not wrap %v", err, sentinel)
				}
			}
			if got := redisCmd(t, r, "EXISTS", s.keys.movie(10)); got != "0" {
				t.Errorf("movie 10 exists after a refused batch")
			}
			if got := redisCmd(t, r, "GET", s.keys.checkpoint(0)); got != "5" {
				t.Errorf("checkpoint after a refused batch = %q, want 5", got)
			}
			if got := redisCmd(t, r, "ZCARD", s.keys.byAvg()); got != "1" {
				t.Errorf("ZCARD by-avg after a refused batch = %s, want 1", got)
			}
			if got := redisCmd(t, r, "SCARD", s.keys.members(0)); got != "1" {
				t.Errorf("SCARD members after a refused batch = %s, want 1", got)
			}
			if tc.want != nil {
				if got := redisCmd(t, r, "XLEN", s.keys.stream()); got != streamLen {
					t.Errorf("XLEN after a refused batch = %s, want %s", got, streamLen)
				}
			}
		})
	}
}

func TestVersionsBeyondFloatPrecision(t *testing.T) {
	// 2^60+1 and 2^60 are the same float64: a script comparing Lua numbers
	// would take the older version for an equal one, and vice versa.
	r := testkit.StartRedis(t)
	s := openStore(t, r)
	const big = int64(1) << 60
	apply(t, s, 0, 1, movie(1, 0, 1, 5, big+1))
	e, _ := s.Claim(ctxT(t), 0)
	err := s.Apply(ctxT(t), engine.Batch{Partition: 0, Epoch: e, Checkpoint: 2, Docs: []engine.MovieStats{movie(1, 0, 2, 6, big)}})
	if !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("Apply version 2^60 over 2^60+1 = %v; want ErrFenced", err)
	}
	newer := movie(1, 0, 3, 9, big+2)
	apply(t, s, 0, 3, newer)
	got, err := s.Get(ctxT(t), 1)
	if err != nil || got.Version != big+2 || got.Count != 3 {
		t.Fatalf("Get after version 2^60+2 = %+v, %v; want version %d count 3", got, err, big+2)
	}

	// Epochs are compared exactly too.
	redisCmd(t, r, "SET", s.keys.epoch(0), strconv.FormatInt(big+1, 10))
	err = s.Apply(ctxT(t), engine.Batch{Partition: 0, Epoch: big, Checkpoint: 4})
	if !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("Apply with epoch 2^60 after a claim of 2^60+1 = %v; want ErrFenced", err)
	}
	if err := s.Apply(ctxT(t), engine.Batch{Partition: 0, Epoch: big + 1, Checkpoint: 4}); err != nil {
		t.Fatalf("Apply with the current epoch 2^60+1: %v", err)
	}
}

func TestRetriedApplyIsNotFenced(t *testing.T) {
	// An attempt whose reply was lost is run again with the same batch
	// token; the second run must succeed without writing twice.
	r := testkit.StartRedis(t)
	s := openStore(t, r)
	e, _ := s.Claim(ctxT(t), 0)
	b := engine.Batch{Partition: 0, Epoch: e, Checkpoint: 3, Docs: []engine.MovieStats{movie(1, 0, 2, 10, 5)}}
	tx, err := s.movieBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := s.attempt(ctxT(t), tx); err != nil {
			t.Fatalf("attempt %d of the same batch: %v", i+1, err)
		}
	}
	if got := redisCmd(t, r, "XLEN", s.keys.stream()); got != "1" {
		t.Errorf("XLEN after a retried batch = %s, want 1", got)
	}
	// The same documents in a new call are a stale write.
	if err := s.Apply(ctxT(t), b); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("a new Apply of the same documents = %v; want ErrFenced", err)
	}
}

func TestApplyRacingAChangeWritesNothing(t *testing.T) {
	// Between an attempt's checks and its EXEC another writer claims the
	// partition, or the partition is dropped: EXEC must write nothing, and
	// the attempt that follows must see why.
	r := testkit.StartRedis(t)
	for _, tc := range []struct {
		name   string
		change func(s *Store)
		want   error // nil: the batch is applied by the next attempt
	}{
		{"claimed by another writer", func(s *Store) { _, _ = s.Claim(context.Background(), 0) }, engine.ErrFenced},
		{"checkpoint rewritten", func(s *Store) { s.client.Set(context.Background(), s.keys.checkpoint(0), "1", 0) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, r)
			e, _ := s.Claim(ctxT(t), 0)
			changed := 0
			s.beforeExec = func() {
				if changed == 0 {
					tc.change(s)
				}
				changed++
			}
			err := s.Apply(ctxT(t), engine.Batch{Partition: 0, Epoch: e, Checkpoint: 7,
				Docs: []engine.MovieStats{movie(5, 0, 1, 8, 1)}})
			if changed < 1 {
				t.Fatalf("the change ran %d times; want at least once", changed)
			}
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("Apply after a racing change = %v; want %v", err, tc.want)
				}
				if _, err := s.Get(ctxT(t), 5); !errors.Is(err, engine.ErrNotFound) {
					t.Errorf("Get of the refused document = %v; want ErrNotFound", err)
				}
				if got := redisCmd(t, r, "EXISTS", s.keys.stream()); got != "0" {
					t.Errorf("EXISTS stream after a refused batch = %s, want 0", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply after a harmless racing change = %v; want nil", err)
			}
			if changed != 2 {
				t.Errorf("attempts = %d, want 2 (the first raced the change)", changed)
			}
			if cp, ok, err := s.Checkpoint(ctxT(t), 0); err != nil || !ok || cp != 7 {
				t.Errorf("Checkpoint = %d, %v, %v; want 7", cp, ok, err)
			}
		})
	}
}

func TestStreamEntries(t *testing.T) {
	r := testkit.StartRedis(t)
	t.Run("one entry per written average", func(t *testing.T) {
		s := openStore(t, r)
		apply(t, s, 0, 1, movie(362, 0, 2, 18, 5), movie(7, 0, 4, 10, 6))
		e, _ := s.Claim(ctxT(t), 0)
		// A replay skips a stale document: no stream entry for it.
		err := s.Apply(ctxT(t), engine.Batch{Partition: 0, Epoch: e, Checkpoint: 2, Replay: true,
			Docs: []engine.MovieStats{movie(362, 0, 1, 1, 4), movie(8, 0, 1, 3, 7)}})
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := s.client.XRange(ctxT(t), s.keys.stream(), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		want := []map[string]string{
			{"movieId": "362", "avg": "9", "count": "2"},
			{"movieId": "7", "avg": "2.5", "count": "4"},
			{"movieId": "8", "avg": "3", "count": "1"},
		}
		if len(msgs) != len(want) {
			t.Fatalf("stream has %d entries, want %d: %v", len(msgs), len(want), msgs)
		}
		for i, w := range want {
			for k, v := range w {
				if got := msgs[i].Values[k]; got != v {
					t.Errorf("entry %d field %s = %v, want %s", i, k, got, v)
				}
			}
		}
	})
	t.Run("trimmed to about MAXLEN", func(t *testing.T) {
		const maxLen = 50
		s := openStore(t, r, WithStreamMaxLen(maxLen))
		var docs []engine.MovieStats
		for i := range 2000 {
			docs = append(docs, movie(int64(i), 0, 1, float64(i%10), 1))
		}
		apply(t, s, 0, 1, docs...)
		n, err := s.client.XLen(ctxT(t), s.keys.stream()).Result()
		if err != nil {
			t.Fatal(err)
		}
		// MAXLEN ~ trims whole nodes (100 entries by default), so the stream
		// keeps at least maxLen entries and less than maxLen plus a node.
		if n < maxLen || n > maxLen+100 {
			t.Fatalf("XLEN after 2000 entries with MAXLEN ~ %d = %d; want %d..%d", maxLen, n, maxLen, maxLen+100)
		}
		last, err := s.client.XRevRangeN(ctxT(t), s.keys.stream(), "+", "-", 1).Result()
		if err != nil || len(last) != 1 || last[0].Values["movieId"] != "1999" {
			t.Fatalf("newest stream entry = %v, %v; want movie 1999", last, err)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		s := openStore(t, r, WithStreamMaxLen(0))
		apply(t, s, 0, 1, movie(1, 0, 1, 1, 1))
		if got := redisCmd(t, r, "EXISTS", s.keys.stream()); got != "0" {
			t.Fatalf("stream exists with WithStreamMaxLen(0)")
		}
	})
}

func TestRangeOrderOnServer(t *testing.T) {
	// Many ties, negative ids and extreme averages, paged through with
	// cursors: the server's order must be exactly avg desc, id asc.
	r := testkit.StartRedis(t)
	s := openStore(t, r)
	rng := rand.New(rand.NewPCG(3, 4))
	var docs []engine.MovieStats
	seen := map[int64]bool{}
	for len(docs) < 600 {
		id := rng.Int64N(2000) - 1000
		if rng.IntN(20) == 0 {
			id = rng.Int64() - rng.Int64()
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		count := rng.Int64N(4) + 1
		sum := float64(rng.IntN(11)) * float64(count) // averages 0..10, many ties
		if rng.IntN(10) == 0 {
			sum = rng.Float64()*20 - 10
		}
		docs = append(docs, movie(id, 0, count, sum, 1))
	}
	apply(t, s, 0, 1, docs...)

	for _, q := range []struct{ min, max float64 }{{math.Inf(-1), math.Inf(1)}, {3, 7}, {5, 5}, {-10, 0}} {
		var want []engine.Cursor
		for _, d := range docs {
			if a := d.Avg(); a >= q.min && a <= q.max {
				want = append(want, engine.Cursor{Avg: a, MovieID: d.MovieID})
			}
		}
		slices.SortFunc(want, byRangeOrder)
		for _, limit := range []int{1, 7, 100, 1000} {
			var got []engine.Cursor
			query := engine.RangeQuery{MinAvg: q.min, MaxAvg: q.max, Limit: limit}
			for pages := 0; ; pages++ {
				if pages > len(docs)+1 {
					t.Fatal("paging does not end")
				}
				page, err := s.Range(ctxT(t), query)
				if err != nil {
					t.Fatalf("Range(%+v): %v", query, err)
				}
				for _, m := range page.Movies {
					got = append(got, engine.Cursor{Avg: m.Avg(), MovieID: m.MovieID})
				}
				if page.Next == nil {
					break
				}
				query.After = page.Next
			}
			if !slices.Equal(got, want) {
				t.Fatalf("range [%v, %v] limit %d: got %d movies %v..., want %d", q.min, q.max, limit, len(got), head(got), len(want))
			}
		}
	}
}

func head(c []engine.Cursor) []engine.Cursor { return c[:min(len(c), 5)] }

func TestScanPartitionManyPages(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r)
	const n = 2500 // several SSCAN pages
	var docs []engine.MovieStats
	for i := range n {
		docs = append(docs, movie(int64(i), 3, 1, 5, 1))
	}
	apply(t, s, 3, 1, docs...)
	apply(t, s, 4, 1, movie(n+1, 4, 1, 5, 1))
	seen := map[int64]int{}
	err := s.ScanPartition(ctxT(t), 3, func(m engine.MovieStats) error {
		seen[m.MovieID]++
		if m.Partition != 3 {
			t.Errorf("movie %d of partition %d in a scan of partition 3", m.MovieID, m.Partition)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ScanPartition: %v", err)
	}
	if len(seen) != n {
		t.Fatalf("ScanPartition saw %d movies, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("movie %d seen %d times", id, c)
		}
	}
}

func TestResetKeepsOtherPrefixes(t *testing.T) {
	r := testkit.StartRedis(t)
	glob := openStore(t, r, WithPrefix("a*"))   // its pattern must not match "ab:..."
	other := openStore(t, r, WithPrefix("ab:")) // matched by an unescaped "a**"
	apply(t, glob, 0, 1, movie(1, 0, 1, 5, 1))
	apply(t, other, 0, 1, movie(1, 0, 1, 5, 1))
	redisCmd(t, r, "SET", "unrelated", "x")

	if err := glob.Reset(ctxT(t)); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if _, err := glob.Get(ctxT(t), 1); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Get after Reset = %v; want ErrNotFound", err)
	}
	if got := redisCmd(t, r, "EXISTS", "a*partition:0:checkpoint"); got != "0" {
		t.Errorf("checkpoint key survived Reset")
	}
	if got := redisCmd(t, r, "EXISTS", "a*partition:0:epoch"); got != "1" {
		t.Errorf("epoch key deleted by Reset: a live old writer could reuse its epoch")
	}
	if _, err := other.Get(ctxT(t), 1); err != nil {
		t.Fatalf("Get on another prefix after Reset: %v", err)
	}
	if got := redisCmd(t, r, "GET", "unrelated"); got != "x" {
		t.Errorf("unrelated key after Reset = %q, want x", got)
	}
}

func TestApplyRefusedByAFullServerIsUnavailable(t *testing.T) {
	// A server out of memory refuses to queue the transaction's writes;
	// EXEC then only says EXECABORT. Apply must report the store
	// unavailable (the engine waits and retries), write nothing, and
	// succeed once the server has room again.
	r := testkit.StartRedis(t)
	s := openStore(t, r)
	e, _ := s.Claim(ctxT(t), 0)
	redisCmd(t, r, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	redisCmd(t, r, "CONFIG", "SET", "maxmemory", "1")
	b := engine.Batch{Partition: 0, Epoch: e, Checkpoint: 9, Docs: []engine.MovieStats{movie(3, 0, 2, 7, 1)}}
	err := s.Apply(ctxT(t), b)
	redisCmd(t, r, "CONFIG", "SET", "maxmemory", "0")
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Apply to a full server = %v; want ErrUnavailable", err)
	}
	if _, ok, _ := s.Checkpoint(ctxT(t), 0); ok {
		t.Errorf("a checkpoint was written by the refused batch")
	}
	if err := s.Apply(ctxT(t), b); err != nil {
		t.Fatalf("Apply once the server has room = %v; want nil", err)
	}
	if got, err := s.Get(ctxT(t), 3); err != nil || got.Count != 2 {
		t.Errorf("Get = %+v, %v; want count 2", got, err)
	}
}
