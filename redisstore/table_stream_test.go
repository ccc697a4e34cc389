package redisstore

import (
	"errors"
	"slices"
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/movies"
)

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

// TestTableStreamEntries writes batches to the movie table with the movie
// stream: one entry per written document, in the batch's order, with the
// fields of the movie layout's stream (movieId, avg, count) in that order;
// a key written twice in a batch gets two entries, a document a replay
// skips none.
func TestTableStreamEntries(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r, WithTableStream(movieTableSpec.Name, movieStream))
	tb := openTable(t, s, movieTableSpec)
	batches := []struct {
		docs   []engine.Doc
		replay bool
	}{
		{docs: []engine.Doc{movieDoc(1, 0, 3, 10, 5), movieDoc(2, 0, 1, 4.5, 6), movieDoc(3, 0, 7, 1.0/3, 7)}},
		{docs: []engine.Doc{movieDoc(1, 0, 4, 12, 8), movieDoc(2, 0, 2, 9, 9), movieDoc(1, 0, 5, 13, 10)}},
		{docs: []engine.Doc{movieDoc(3, 0, 1, 1, 7), movieDoc(-4, 0, 2, -3, 11)}, replay: true},
	}
	e, err := tb.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, bt := range batches {
		if err := tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: e, Docs: bt.docs, Checkpoint: int64(i), Replay: bt.replay}); err != nil {
			t.Fatalf("Apply %d: %v", i, err)
		}
	}
	want := [][]string{
		{"movieId", "1", "avg", "3.3333333333333335", "count", "3"},
		{"movieId", "2", "avg", "4.5", "count", "1"},
		{"movieId", "3", "avg", "0.047619047619047616", "count", "7"},
		{"movieId", "1", "avg", "3", "count", "4"},
		{"movieId", "2", "avg", "4.5", "count", "2"},
		{"movieId", "1", "avg", "2.6", "count", "5"},
		{"movieId", "-4", "avg", "-1.5", "count", "2"},
	}
	got := streamEntries(t, s, s.keys.prefix+movieStream.Key)
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("stream = %v, want %v", got, want)
	}
}

// TestTableStreamTrimmed checks that the stream is trimmed to about
// MaxLen entries, keeping the newest.
func TestTableStreamTrimmed(t *testing.T) {
	const maxLen = 50
	r := testkit.StartRedis(t)
	st := movieStream
	st.MaxLen = maxLen
	s := openStore(t, r, WithTableStream(movieTableSpec.Name, st))
	tb := openTable(t, s, movieTableSpec)
	docs := make([]engine.Doc, 2000)
	for i := range docs {
		docs[i] = movieDoc(int64(i), 0, 1, float64(i%10), 1)
	}
	tapply(t, tb, 0, 1, docs...)
	key := s.keys.prefix + st.Key
	n, err := s.client.XLen(ctxT(t), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole nodes (100 entries by default), so the stream
	// keeps at least maxLen entries and less than maxLen plus a node.
	if n < maxLen || n > maxLen+100 {
		t.Fatalf("XLEN after 2000 entries with MAXLEN ~ %d = %d; want %d..%d", maxLen, n, maxLen, maxLen+100)
	}
	last, err := s.client.XRevRangeN(ctxT(t), key, "+", "-", 1).Result()
	if err != nil || len(last) != 1 || last[0].Values["movieId"] != "1999" {
		t.Fatalf("newest stream entry = %v, %v; want movie 1999", last, err)
	}
}

// TestTableStreamRefusedBatch checks that a refused batch adds no entry.
func TestTableStreamRefusedBatch(t *testing.T) {
	r := testkit.StartRedis(t)
	s := openStore(t, r, WithTableStream("movies", movieStream))
	tb := openTable(t, s, movieTableSpec)
	key := s.keys.prefix + movieStream.Key
	tapply(t, tb, 0, 1, movieDoc(1, 0, 1, 5, 10))
	e, err := tb.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		batch engine.DocBatch
	}{
		{"stale version", engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 2,
			Docs: []engine.Doc{movieDoc(2, 0, 1, 1, 11), movieDoc(1, 0, 2, 2, 10)}}},
		{"old epoch", engine.DocBatch{Partition: 0, Epoch: e - 1, Checkpoint: 2,
			Docs: []engine.Doc{movieDoc(2, 0, 1, 1, 11)}}},
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
		tapply(t, openTable(t, s, movieTableSpec), 0, 1, movieDoc(1, 0, 1, 5, 10))
		if got := redisCmd(t, r, "EXISTS", s.keys.prefix+off.Key); got != "0" {
			t.Errorf("EXISTS stream = %s, want 0", got)
		}
	})
	t.Run("other table", func(t *testing.T) {
		s := openStore(t, r, WithTableStream("other", movieStream))
		tapply(t, openTable(t, s, movieTableSpec), 0, 1, movieDoc(1, 0, 1, 5, 10))
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
			Docs: []engine.Doc{movieDoc(1, 0, 1, 5, 10)}})
		if !errors.Is(err, errWrongType) {
			t.Fatalf("Apply = %v, want errWrongType", err)
		}
		if _, err := tb.Get(ctxT(t), movieDoc(1, 0, 1, 1, 1).Key); !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("Get after a refused batch = %v, want ErrNotFound", err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		s := openStore(t, r, WithTableStream("movies", movieStream))
		tb := openTable(t, s, movieTableSpec)
		tapply(t, tb, 0, 1, movieDoc(1, 0, 1, 5, 10))
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
		{"empty key", TableStream{MaxLen: 10, Fields: movies.StreamFields}},
		{"tables' namespace", TableStream{Key: "t:x", MaxLen: 10, Fields: movies.StreamFields}},
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
