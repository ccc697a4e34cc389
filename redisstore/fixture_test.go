package redisstore

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A key dump is a gzip-compressed file of JSON lines, one line per key,
// sorted by key:
//
//	{"key": "<name>", "type": "string", "string": "<value>"}
//	{"key": "<name>", "type": "hash",   "hash": {"<field>": "<value>", ...}}
//	{"key": "<name>", "type": "set",    "set": ["<member>", ...]}
//	{"key": "<name>", "type": "zset",   "zset": [["<member>", "<score>"], ...]}
//	{"key": "<name>", "type": "stream", "stream": [{"id": "<ms-seq>", "fields": ["<field>", "<value>", ...]}, ...]}
//
// Names, members and values are the bytes Redis holds, which must be valid
// UTF-8 (the movie layout's are ASCII); scores are decimal strings; stream
// fields keep their order. TTLs and stream consumer groups are not kept.

// dumpKey is one line of a key dump.
type dumpKey struct {
	Key    string            `json:"key"`
	Type   string            `json:"type"`
	String string            `json:"string,omitempty"`
	Hash   map[string]string `json:"hash,omitempty"`
	Set    []string          `json:"set,omitempty"`
	ZSet   [][2]string       `json:"zset,omitempty"`
	Stream []dumpEntry       `json:"stream,omitempty"`
}

// dumpEntry is one stream entry of a key dump.
type dumpEntry struct {
	ID     string   `json:"id"`
	Fields []string `json:"fields"`
}

// loadDump writes every key of the dump at path into the database of c
// (keys already there are replaced), returning the keys by name.
func loadDump(ctx context.Context, c redis.UniversalClient, path string) (map[string]dumpKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load dump: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("load dump %s: %w", path, err)
	}
	out := make(map[string]dumpKey)
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<26)
	pipe := c.Pipeline()
	line := 0
	for sc.Scan() {
		line++
		var k dumpKey
		if err := json.Unmarshal(sc.Bytes(), &k); err != nil {
			return nil, fmt.Errorf("load dump %s line %d: %w", path, line, err)
		}
		pipe.Del(ctx, k.Key)
		switch k.Type {
		case "string":
			pipe.Set(ctx, k.Key, k.String, 0)
		case "hash":
			args := make([]any, 0, 2*len(k.Hash))
			for f, v := range k.Hash {
				args = append(args, f, v)
			}
			pipe.HSet(ctx, k.Key, args...)
		case "set":
			args := make([]any, len(k.Set))
			for i, m := range k.Set {
				args[i] = m
			}
			pipe.SAdd(ctx, k.Key, args...)
		case "zset":
			zs := make([]redis.Z, len(k.ZSet))
			for i, z := range k.ZSet {
				score, err := strconv.ParseFloat(z[1], 64)
				if err != nil {
					return nil, fmt.Errorf("load dump %s line %d: score %q: %w", path, line, z[1], err)
				}
				zs[i] = redis.Z{Member: z[0], Score: score}
			}
			pipe.ZAdd(ctx, k.Key, zs...)
		case "stream":
			for _, e := range k.Stream {
				vals := make([]any, len(e.Fields))
				for i, v := range e.Fields {
					vals[i] = v
				}
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: k.Key, ID: e.ID, Values: vals})
			}
		default:
			return nil, fmt.Errorf("load dump %s line %d: key %s has unknown type %q", path, line, k.Key, k.Type)
		}
		out[k.Key] = k
		if pipe.Len() >= 1000 {
			if _, err := pipe.Exec(ctx); err != nil {
				return nil, fmt.Errorf("load dump %s: %w", path, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("load dump %s: %w", path, err)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("load dump %s: %w", path, err)
	}
	return out, nil
}

// fixtureMovie is one movie as the movie layout fixture expects it after
// the migration.
type fixtureMovie struct {
	ID        int64           `json:"id"`
	Partition int32           `json:"partition"`
	Count     int64           `json:"count"`
	Sum       float64         `json:"sum"`
	Version   int64           `json:"version"`
	Sources   map[int32]int64 `json:"sources"`
}

// fixtureExpect is what the movie layout fixture holds, recorded by the
// program that wrote it: the movies, and per partition the checkpoint, the
// last epoch claimed and the batch token.
type fixtureExpect struct {
	Prefix      string           `json:"prefix"`
	StreamKey   string           `json:"streamKey"`
	Movies      []fixtureMovie   `json:"movies"`
	Checkpoints map[int32]int64  `json:"checkpoints"`
	Epochs      map[int32]int64  `json:"epochs"`
	Batches     map[int32]string `json:"batches"`
}

// The movie layout fixture: a dump of every key the movie layout's own
// store (deleted since; its writer is fixture_gen_test.go in the history)
// wrote, and what it holds. It is data from that version, not to be
// regenerated.
const (
	fixtureDump       = "testdata/movie-layout.jsonl.gz"
	fixtureExpectPath = "testdata/movie-layout.expect.json"
)

func readExpect(path string) (fixtureExpect, error) {
	var e fixtureExpect
	b, err := os.ReadFile(path)
	if err != nil {
		return e, fmt.Errorf("read expectations: %w", err)
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("read expectations %s: %w", path, err)
	}
	return e, nil
}
