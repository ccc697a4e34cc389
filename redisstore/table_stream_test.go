package redisstore

import (
	"errors"
	"slices"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// movieStream is the movie table's stream as the movie job configures it.
var movieStream = TableStream{Key: "rating-averages-stream", MaxLen: DefaultStreamMaxLen, Fields: streamMovieFields}

// streamEntries reads every entry of key as its field-value list, in the
// order the fields were written.
func streamEntries(t *testing.T, s *Store, key string) [][]string {
	t.Helper()
	raw, err := s.client.Do(ctxT(t), "XRANGE", key, "-", "+").Slice()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", key, err)
	}
	out := make([][]string, len(raw))
	for i, e := range raw {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			t.Fatalf("XRANGE %s entry %d = %v", key, i, e)
		}
		fields, _ := pair[1].([]any)
		for _, f := range fields {
			v, _ := f.(string)
			out[i] = append(out[i], v)
		}
	}
	return out
}

// TestTableStreamMatchesMovieStream writes the same batches through the
// movie layout and through a movie table with the movie stream: both
// streams, under the same key of their prefixes, get the same entries.
func TestTableStreamMatchesMovieStream(t *testing.T) {
	r := testkit.StartRedis(t)
	ms := openStore(t, r)
	ts := openStore(t, r, WithTableStream("movies", movieStream))
	tb := openTable(t, ts, movieTableSpec)
	batches := []struct {
		docs   []engine.MovieStats
		replay bool
	}{
		{docs: []engine.MovieStats{movie(1, 0, 3, 10, 5), movie(2, 0, 1, 4.5, 6), movie(3, 0, 7, 1.0/3, 7)}},
		// Movie 1 twice in one batch: two entries, in order.
		{docs: []engine.MovieStats{movie(1, 0, 4, 12, 8), movie(2, 0, 2, 9, 9), movie(1, 0, 5, 13, 10)}},
		// A replay skips the stale movie 3: no entry for it.
		{docs: []engine.MovieStats{movie(3, 0, 1, 1, 7), movie(4, 0, 2, -3, 11)}, replay: true},
	}
	me, err := ms.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	te, err := tb.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, bt := range batches {
		docs := make([]engine.Doc, len(bt.docs))
		for j, m := range bt.docs {
			docs[j] = movieTableDoc(m)
		}
		if err := ms.Apply(ctxT(t), engine.Batch{Partition: 0, Epoch: me, Docs: bt.docs, Checkpoint: int64(i), Replay: bt.replay}); err != nil {
			t.Fatalf("movie Apply %d: %v", i, err)
		}
		if err := tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: te, Docs: docs, Checkpoint: int64(i), Replay: bt.replay}); err != nil {
			t.Fatalf("table Apply %d: %v", i, err)
		}
	}
	want := streamEntries(t, ms, ms.keys.stream())
	got := streamEntries(t, ts, ts.keys.prefix+"rating-averages-stream")
	if len(want) != 7 {
		t.Fatalf("movie stream has %d entries, want 7: %v", len(want), want)
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("table stream = %v, want %v", got, want)
	}
}

// TestTableStreamRefusedBatch checks that a refused batch adds no entry.
func TestTableStreamRefusedBatch(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r, WithTableStream("movies", movieStream))
	tb := openTable(t, s, movieTableSpec)
	key := s.keys.prefix + movieStream.Key
	tapply(t, tb, 0, 1, movieTableDoc(movie(1, 0, 1, 5, 10)))
	e, err := tb.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		batch engine.DocBatch
	}{
		{"stale version", engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 2,
			Docs: []engine.Doc{movieTableDoc(movie(2, 0, 1, 1, 11)), movieTableDoc(movie(1, 0, 2, 2, 10))}}},
		{"old epoch", engine.DocBatch{Partition: 0, Epoch: e - 1, Checkpoint: 2,
			Docs: []engine.Doc{movieTableDoc(movie(2, 0, 1, 1, 11))}}},
	} {
		t.Run(bc.name, func(t *testing.T) {
			err := tb.Apply(ctxT(t), bc.batch)
			if !errors.Is(err, engine.ErrFenced) {
				t.Fatalf("Apply = %v, want ErrFenced", err)
			}
			if got := redisCmd(t, r, "XLEN", key); got != "1" {
				t.Errorf("XLEN = %s, want 1", got)
			}
		})
	}
}

// TestTableStreamOptions covers a stream turned off, a stream key of the
// wrong type, Reset, and invalid options.
func TestTableStreamOptions(t *testing.T) {
	r := testkit.StartRedis(t)
	t.Run("off", func(t *testing.T) {
		off := movieStream
		off.MaxLen = 0
		s := openStore(t, r, WithTableStream("movies", off))
		tapply(t, openTable(t, s, movieTableSpec), 0, 1, movieTableDoc(movie(1, 0, 1, 5, 10)))
		if got := redisCmd(t, r, "EXISTS", s.keys.prefix+off.Key); got != "0" {
			t.Errorf("EXISTS stream = %s, want 0", got)
		}
	})
	t.Run("other table", func(t *testing.T) {
		s := openStore(t, r, WithTableStream("other", movieStream))
		tapply(t, openTable(t, s, movieTableSpec), 0, 1, movieTableDoc(movie(1, 0, 1, 5, 10)))
		if got := redisCmd(t, r, "EXISTS", s.keys.prefix+movieStream.Key); got != "0" {
			t.Errorf("EXISTS stream = %s, want 0", got)
		}
	})
	t.Run("wrong type", func(t *testing.T) {
		s := openStore(t, r, WithTableStream("movies", movieStream))
		tb := openTable(t, s, movieTableSpec)
		redisCmd(t, r, "SET", s.keys.prefix+movieStream.Key, "not a stream")
		e, err := tb.Claim(ctxT(t), 0)
		if err != nil {
			t.Fatal(err)
		}
		err = tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 1,
			Docs: []engine.Doc{movieTableDoc(movie(1, 0, 1, 5, 10))}})
		if !errors.Is(err, errWrongType) {
			t.Fatalf("Apply = %v, want errWrongType", err)
		}
		if _, err := tb.Get(ctxT(t), movieTableDoc(movie(1, 0, 1, 1, 1)).Key); !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("Get after a refused batch = %v, want ErrNotFound", err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		s := openStore(t, r, WithTableStream("movies", movieStream))
		tb := openTable(t, s, movieTableSpec)
		tapply(t, tb, 0, 1, movieTableDoc(movie(1, 0, 1, 5, 10)))
		if err := tb.Reset(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if got := redisCmd(t, r, "EXISTS", s.keys.prefix+movieStream.Key); got != "0" {
			t.Errorf("EXISTS stream after Reset = %s, want 0", got)
		}
	})
	for _, bc := range []struct {
		name string
		st   TableStream
	}{
		{"empty key", TableStream{MaxLen: 10, Fields: streamMovieFields}},
		{"tables' namespace", TableStream{Key: "t:x", MaxLen: 10, Fields: streamMovieFields}},
		{"no fields", TableStream{Key: "changes", MaxLen: 10}},
	} {
		t.Run("invalid/"+bc.name, func(t *testing.T) {
			_, err := Open(ctxT(t), r.URL(), WithTableStream("movies", bc.st))
			if !errors.Is(err, engine.ErrInvalid) {
				t.Errorf("Open = %v, want ErrInvalid", err)
			}
		})
	}
}
