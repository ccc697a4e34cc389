package redisstore

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestWriteMovieLayoutFixture writes the movie layout fixture with the
// movie layout's own Store (run with KEEPSTATE_WRITE_FIXTURE=1): about
// 3,000 movies over 3 partitions, updated over several batches with
// checkpoints, partitions claimed several times and a fourth partition
// only claimed, then a dump of every key of the prefix and the
// expectations. The migration tests read only the files.
func TestWriteMovieLayoutFixture(t *testing.T) {
	if os.Getenv("KEEPSTATE_WRITE_FIXTURE") != "1" {
		t.Skip("set KEEPSTATE_WRITE_FIXTURE=1 to write " + fixtureDump)
	}
	r := testkit.StartRedis(t)
	ctx := ctxT(t)
	s, err := Open(ctx, r.URL(), WithStreamMaxLen(500)) // DefaultPrefix
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(2026, 12))
	exp := fixtureExpect{Prefix: DefaultPrefix, StreamKey: s.keys.stream(), Checkpoints: map[int32]int64{},
		Epochs: map[int32]int64{}, Batches: map[int32]string{}}
	movies := map[int64]engine.MovieStats{}
	const parts, perPart = 3, 1000
	for p := range int32(parts) {
		// Ids of p: spread, a few negative, and a few large.
		ids := make([]int64, perPart)
		for i := range ids {
			ids[i] = int64(p) + parts*int64(i)*7919
			switch i % 97 {
			case 5:
				ids[i] = -ids[i] - 1
			case 11:
				ids[i] += 1 << 50
			}
		}
		offset := int64(rng.IntN(1000))
		var epoch int64
		for round := range 6 {
			if round%2 == 0 || p == 1 {
				if epoch, err = s.Claim(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			// Round 0 inserts 400 movies, later rounds insert and update.
			n := 400
			start := 0
			if round > 0 {
				start = rng.IntN(perPart - n)
			}
			batch := make([]engine.MovieStats, 0, n)
			for _, id := range ids[start : start+n] {
				offset += int64(rng.IntN(3)) + 1
				m, ok := movies[id]
				if !ok {
					m = engine.MovieStats{MovieID: id, Partition: p, Sources: map[int32]int64{}}
				}
				m.Sources = maps.Clone(m.Sources)
				adds := rng.IntN(5) + 1
				for range adds {
					if id%3 == 0 {
						m.Sum += float64(rng.IntN(11)) / 2 // ratings, many ties
					} else {
						m.Sum += rng.Float64() * 10 // every bit of the mantissa used
					}
				}
				m.Count += int64(adds)
				m.Version = offset
				m.Sources[p] = offset
				m.Sources[(p+1)%parts] = int64(rng.IntN(1 << 20))
				movies[id] = m
				batch = append(batch, m)
			}
			if err := s.Apply(ctx, engine.Batch{Partition: p, Epoch: epoch, Docs: batch, Checkpoint: offset + 1}); err != nil {
				t.Fatalf("Apply partition %d round %d: %v", p, round, err)
			}
			exp.Checkpoints[p] = offset + 1
		}
		if p == 2 { // claimed again after its last batch: a later epoch than the last writer's
			for range 2 {
				if epoch, err = s.Claim(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
		}
		exp.Epochs[p] = epoch
		if exp.Batches[p], err = s.client.Get(ctx, s.keys.batch(p)).Result(); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // partition 7: only claimed
		if exp.Epochs[7], err = s.Claim(ctx, 7); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range movies {
		exp.Movies = append(exp.Movies, fixtureMovie{ID: m.MovieID, Partition: m.Partition, Count: m.Count,
			Sum: m.Sum, Version: m.Version, Sources: m.Sources})
	}
	slices.SortFunc(exp.Movies, func(a, b fixtureMovie) int { return int(min(max(a.ID-b.ID, -1), 1)) })

	keys, err := dumpKeys(t, s)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(fixtureDump)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	enc := json.NewEncoder(zw)
	for _, k := range keys {
		if err := enc.Encode(k); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(exp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fixtureExpectPath, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d keys, %d movies", len(keys), len(exp.Movies))
}

// dumpKeys reads every key of s's prefix as dump lines, sorted by key.
func dumpKeys(t *testing.T, s *Store) ([]dumpKey, error) {
	ctx := ctxT(t)
	var names []string
	iter := s.client.Scan(ctx, 0, s.keys.pattern(), 1000).Iterator()
	for iter.Next(ctx) {
		names = append(names, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := make([]dumpKey, 0, len(names))
	for _, name := range names {
		typ, err := s.client.Type(ctx, name).Result()
		if err != nil {
			return nil, err
		}
		k := dumpKey{Key: name, Type: typ}
		switch typ {
		case "string":
			k.String, err = s.client.Get(ctx, name).Result()
		case "hash":
			k.Hash, err = s.client.HGetAll(ctx, name).Result()
		case "set":
			k.Set, err = s.client.SMembers(ctx, name).Result()
			slices.Sort(k.Set)
		case "zset":
			var zs []struct{ m, s string }
			vals, zerr := s.client.ZRangeWithScores(ctx, name, 0, -1).Result()
			for _, z := range vals {
				zs = append(zs, struct{ m, s string }{z.Member.(string), strconv.FormatFloat(z.Score, 'g', -1, 64)})
			}
			for _, z := range zs {
				k.ZSet = append(k.ZSet, [2]string{z.m, z.s})
			}
			err = zerr
		case "stream":
			raw, xerr := s.client.Do(ctx, "XRANGE", name, "-", "+").Slice()
			for _, e := range raw {
				pair := e.([]any)
				entry := dumpEntry{ID: pair[0].(string)}
				for _, f := range pair[1].([]any) {
					entry.Fields = append(entry.Fields, f.(string))
				}
				k.Stream = append(k.Stream, entry)
			}
			err = xerr
		default:
			return nil, fmt.Errorf("key %s has type %s", name, typ)
		}
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(k)
		if !utf8.Valid(b) {
			return nil, fmt.Errorf("key %s is not valid UTF-8", name)
		}
		out = append(out, k)
	}
	return out, nil
}
