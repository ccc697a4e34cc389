package redisstore

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// changeStream is the stream of the orders table in the fault tests: one
// entry per written document, naming its key.
var changeStream = TableStream{Key: "changes", MaxLen: 1000,
	Fields: func(d engine.Doc) []any { return []any{"key", string(d.Key)} }}

// openOrders opens a store on r with the orders table and its change
// stream.
func openOrders(t *testing.T, r *testkit.Redis, opts ...Option) (*Store, *table) {
	t.Helper()
	s := openStore(t, r, append([]Option{WithTableStream(orderSpec.Name, changeStream)}, opts...)...)
	return s, openTable(t, s, orderSpec)
}

func TestTableApplyRefusedWritesNothing(t *testing.T) {
	r := testkit.StartRedis(t)
	tests := []struct {
		name    string
		prepare func(t *testing.T, s *Store, tb *table) engine.DocBatch
		want    error // nil: some other (non-sentinel) error
	}{
		{"stale version", func(t *testing.T, s *Store, tb *table) engine.DocBatch {
			e, _ := tb.Claim(ctxT(t), 0)
			return engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 50,
				Docs: []engine.Doc{odoc("c", 0, 1, 5, "x"), odoc("a", 0, 5, 9, "y")}}
		}, engine.ErrFenced},
		{"old epoch", func(t *testing.T, s *Store, tb *table) engine.DocBatch {
			e, _ := tb.Claim(ctxT(t), 0)
			_, _ = tb.Claim(ctxT(t), 0)
			return engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 50, Docs: []engine.Doc{odoc("c", 0, 1, 5, "x")}}
		}, engine.ErrFenced},
		{"NaN index value", func(t *testing.T, s *Store, tb *table) engine.DocBatch {
			e, _ := tb.Claim(ctxT(t), 0)
			return engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 50,
				Docs: []engine.Doc{odoc("c", 0, 1, 5, "x"), odoc("d", 0, 1, math.NaN(), "x")}}
		}, engine.ErrInvalid},
		{"document of another partition", func(t *testing.T, s *Store, tb *table) engine.DocBatch {
			e, _ := tb.Claim(ctxT(t), 0)
			return engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 50,
				Docs: []engine.Doc{odoc("c", 0, 1, 5, "x"), odoc("d", 1, 1, 5, "x")}}
		}, engine.ErrInvalid},
		{"document key of another type", func(t *testing.T, s *Store, tb *table) engine.DocBatch {
			// Another program wrote a plain string where a document's hash
			// lives: the read of the stored version fails, and nothing is
			// written (no panic on the empty reply either).
			redisCmd(t, r, "SET", tb.keys.doc(0, []byte("d")), "not a hash")
			// No token yet, as before a partition's first batch: the absent
			// token is the pipeline's first "error", ahead of the failed read.
			redisCmd(t, r, "DEL", tb.keys.batch(0))
			e, _ := tb.Claim(ctxT(t), 0)
			return engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 50,
				Docs: []engine.Doc{odoc("c", 0, 1, 5, "x"), odoc("d", 0, 1, 5, "x")}}
		}, nil},
		{"stream key of another type", func(t *testing.T, s *Store, tb *table) engine.DocBatch {
			// Another program wrote a plain string where the stream lives:
			// Apply must notice before its first write.
			redisCmd(t, r, "SET", tb.streamKey(0), "not a stream")
			e, _ := tb.Claim(ctxT(t), 0)
			return engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 50, Docs: []engine.Doc{odoc("c", 0, 1, 5, "x")}}
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, tb := openOrders(t, r)
			tapply(t, tb, 0, 5, odoc("a", 0, 5, 1, "x"))
			streamLen := redisCmd(t, r, "XLEN", tb.streamKey(0))
			b := tc.prepare(t, s, tb)
			err := tb.Apply(ctxT(t), b)
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
			if got := redisCmd(t, r, "EXISTS", tb.keys.doc(0, []byte("c"))); got != "0" {
				t.Errorf("document c exists after a refused batch")
			}
			if got := redisCmd(t, r, "GET", tb.keys.checkpoint(0)); got != "5" {
				t.Errorf("checkpoint after a refused batch = %q, want 5", got)
			}
			for _, ix := range orderSpec.Indexes {
				if got := redisCmd(t, r, "ZCARD", tb.keys.index(0, ix.Name)); got != "1" {
					t.Errorf("ZCARD %s after a refused batch = %s, want 1", ix.Name, got)
				}
			}
			if got := redisCmd(t, r, "SCARD", tb.keys.members(0)); got != "1" {
				t.Errorf("SCARD members after a refused batch = %s, want 1", got)
			}
			if tc.want != nil {
				if got := redisCmd(t, r, "XLEN", tb.streamKey(0)); got != streamLen {
					t.Errorf("XLEN after a refused batch = %s, want %s", got, streamLen)
				}
			}
		})
	}
}

func TestTableVersionsBeyondFloatPrecision(t *testing.T) {
	// 2^60+1 and 2^60 are the same float64: a check comparing Lua or Go
	// floats would take the older version for an equal one, and vice versa.
	r := testkit.StartRedis(t)
	_, tb := openOrders(t, r)
	const big = int64(1) << 60
	tapply(t, tb, 0, 1, odoc("a", 0, big+1, 5, "x"))
	e, _ := tb.Claim(ctxT(t), 0)
	err := tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 2, Docs: []engine.Doc{odoc("a", 0, big, 6, "y")}})
	if !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("Apply version 2^60 over 2^60+1 = %v; want ErrFenced", err)
	}
	tapply(t, tb, 0, 3, odoc("a", 0, big+2, 9, "z"))
	if got, err := tb.Get(ctxT(t), []byte("a")); err != nil || got.Version != big+2 || got.Index[1].Str != "z" {
		t.Fatalf("Get after version 2^60+2 = %+v, %v; want version %d tier z", got, err, big+2)
	}

	// Epochs are compared exactly too.
	redisCmd(t, r, "SET", tb.keys.epoch(0), strconv.FormatInt(big+1, 10))
	err = tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: big, Checkpoint: 4})
	if !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("Apply with epoch 2^60 after a claim of 2^60+1 = %v; want ErrFenced", err)
	}
	if err := tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: big + 1, Checkpoint: 4}); err != nil {
		t.Fatalf("Apply with the current epoch 2^60+1: %v", err)
	}
}

func TestTableRetriedApplyIsNotFenced(t *testing.T) {
	// An attempt whose reply was lost is run again with the same batch
	// token; the second run must succeed without writing twice.
	r := testkit.StartRedis(t)
	s, tb := openOrders(t, r)
	e, _ := tb.Claim(ctxT(t), 0)
	b := engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 3, Docs: []engine.Doc{odoc("a", 0, 5, 2, "x")}}
	tx, err := tb.batch(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := s.attempt(ctxT(t), tx); err != nil {
			t.Fatalf("attempt %d of the same batch: %v", i+1, err)
		}
	}
	if got := redisCmd(t, r, "XLEN", tb.streamKey(0)); got != "1" {
		t.Errorf("XLEN after a retried batch = %s, want 1", got)
	}
	// The same documents in a new call are a stale write.
	if err := tb.Apply(ctxT(t), b); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("a new Apply of the same documents = %v; want ErrFenced", err)
	}
}

func TestTableApplyRacingAChangeWritesNothing(t *testing.T) {
	// Between an attempt's checks and its EXEC another writer claims the
	// partition, or the checkpoint changes: EXEC must write nothing, and
	// the attempt that follows must see why.
	r := testkit.StartRedis(t)
	for _, tc := range []struct {
		name   string
		change func(s *Store, tb *table)
		want   error // nil: the batch is applied by the next attempt
	}{
		{"claimed by another writer", func(s *Store, tb *table) { _, _ = tb.Claim(context.Background(), 0) }, engine.ErrFenced},
		{"checkpoint rewritten", func(s *Store, tb *table) {
			s.client.Set(context.Background(), tb.keys.checkpoint(0), "1", 0)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, tb := openOrders(t, r)
			e, _ := tb.Claim(ctxT(t), 0)
			changed := 0
			s.beforeExec = func() {
				if changed == 0 {
					tc.change(s, tb)
				}
				changed++
			}
			err := tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 7,
				Docs: []engine.Doc{odoc("a", 0, 1, 8, "x")}})
			if changed < 1 {
				t.Fatalf("the change ran %d times; want at least once", changed)
			}
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("Apply after a racing change = %v; want %v", err, tc.want)
				}
				if _, err := tb.Get(ctxT(t), []byte("a")); !errors.Is(err, engine.ErrNotFound) {
					t.Errorf("Get of the refused document = %v; want ErrNotFound", err)
				}
				if got := redisCmd(t, r, "EXISTS", tb.streamKey(0)); got != "0" {
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
			if cp, ok, err := tb.Checkpoint(ctxT(t), 0); err != nil || !ok || cp != 7 {
				t.Errorf("Checkpoint = %d, %v, %v; want 7", cp, ok, err)
			}
		})
	}
}

func TestTableApplyRefusedByAFullServerIsUnavailable(t *testing.T) {
	// A server out of memory refuses to queue the transaction's writes;
	// EXEC then only says EXECABORT. Apply must report the store
	// unavailable (the engine waits and retries), write nothing, and
	// succeed once the server has room again.
	r := testkit.StartRedis(t)
	_, tb := openOrders(t, r)
	e, _ := tb.Claim(ctxT(t), 0)
	redisCmd(t, r, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	redisCmd(t, r, "CONFIG", "SET", "maxmemory", "1")
	b := engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 9, Docs: []engine.Doc{odoc("a", 0, 1, 7, "x")}}
	err := tb.Apply(ctxT(t), b)
	redisCmd(t, r, "CONFIG", "SET", "maxmemory", "0")
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Apply to a full server = %v; want ErrUnavailable", err)
	}
	if _, ok, _ := tb.Checkpoint(ctxT(t), 0); ok {
		t.Errorf("a checkpoint was written by the refused batch")
	}
	if err := tb.Apply(ctxT(t), b); err != nil {
		t.Fatalf("Apply once the server has room = %v; want nil", err)
	}
	if got, err := tb.Get(ctxT(t), []byte("a")); err != nil || got.Version != 1 {
		t.Errorf("Get = %+v, %v; want version 1", got, err)
	}
}

func TestTableResetKeepsOtherPrefixes(t *testing.T) {
	r := testkit.StartRedis(t)
	glob := openStore(t, r, WithPrefix("a*"))   // its pattern must not match "ab:..."
	other := openStore(t, r, WithPrefix("ab:")) // matched by the unescaped "a*t:orders:*"
	gt, ot := openTable(t, glob, orderSpec), openTable(t, other, orderSpec)
	tapply(t, gt, 0, 1, odoc("a", 0, 1, 5, "x"))
	tapply(t, ot, 0, 1, odoc("a", 0, 1, 5, "x"))
	redisCmd(t, r, "SET", "unrelated", "x")

	if err := gt.Reset(ctxT(t)); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if _, err := gt.Get(ctxT(t), []byte("a")); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Get after Reset = %v; want ErrNotFound", err)
	}
	if got := redisCmd(t, r, "EXISTS", gt.keys.checkpoint(0)); got != "0" {
		t.Errorf("checkpoint key survived Reset")
	}
	if got := redisCmd(t, r, "EXISTS", gt.keys.epoch(0)); got != "1" {
		t.Errorf("epoch key deleted by Reset: a live old writer could reuse its epoch")
	}
	if _, err := ot.Get(ctxT(t), []byte("a")); err != nil {
		t.Fatalf("Get on another prefix after Reset: %v", err)
	}
	if got := redisCmd(t, r, "GET", "unrelated"); got != "x" {
		t.Errorf("unrelated key after Reset = %q, want x", got)
	}
}

// replyError is an error reply of the server, as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestTransientReplies(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{replyError("LOADING Redis is loading the dataset in memory"), true},
		{replyError("READONLY You can't write against a read only replica."), true},
		{replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{replyError("BUSY Redis is busy running a script."), true},
		{replyError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), true},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), true},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{replyError("ERR max number of clients reached"), true},
		{replyError("CLUSTERDOWN The cluster is down"), true},
		{replyError("MOVED 3999 127.0.0.1:6381"), true},
		{replyError("ASK 3999 127.0.0.1:6381"), true},
		{replyError("CROSSSLOT Keys in request don't hash to the same slot"), false},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{replyError("NOSCRIPT No matching script."), false},
		{replyError("ERR syntax error"), false},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{context.DeadlineExceeded, true},
	}
	for _, tc := range tests {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%q) = %v, want %v", tc.err, got, tc.want)
		}
		if got := errors.Is(wrap("op", tc.err), engine.ErrUnavailable); got != tc.want {
			t.Errorf("wrap(%q) wraps ErrUnavailable = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestTableReadOnlyServerIsUnavailable(t *testing.T) {
	// A server turned into a replica (of a master it cannot reach) keeps
	// its data and answers reads but refuses writes with READONLY: every
	// write is unavailable, not refused, and works again on the same
	// table once the server takes writes again.
	r := testkit.StartRedis(t)
	_, tb := openOrders(t, r)
	tapply(t, tb, 0, 5, odoc("a", 0, 1, 1, "x"))
	e, err := tb.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	redisCmd(t, r, "REPLICAOF", "127.0.0.1", strconv.Itoa(closedPort(t)))
	t.Cleanup(func() { redisCmd(t, r, "REPLICAOF", "NO", "ONE") })

	writes := map[string]error{
		"Apply": tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 6,
			Docs: []engine.Doc{odoc("b", 0, 1, 2, "y")}}),
		"DropPartition": tb.DropPartition(ctxT(t), 0),
		"Reset":         tb.Reset(ctxT(t)),
	}
	_, writes["Claim"] = tb.Claim(ctxT(t), 0)
	for op, err := range writes {
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("%s on a read-only server = %v; want ErrUnavailable", op, err)
		}
		if errors.Is(err, engine.ErrFenced) || errors.Is(err, engine.ErrInvalid) {
			t.Errorf("%s on a read-only server = %v; must not look like ErrFenced or ErrInvalid", op, err)
		}
	}
	if _, err := tb.Get(ctxT(t), []byte("a")); err != nil {
		t.Errorf("Get on a read-only server: %v", err)
	}
	wantKeys(t, tb, engine.IndexQuery{Index: "total", Desc: true, Limit: 5}, "a")

	redisCmd(t, r, "REPLICAOF", "NO", "ONE")
	if err := tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: e, Checkpoint: 6,
		Docs: []engine.Doc{odoc("b", 0, 1, 2, "y")}}); err != nil {
		t.Fatalf("Apply once the server takes writes again: %v", err)
	}
	wantKeys(t, tb, engine.IndexQuery{Index: "total", Desc: true, Limit: 5}, "b", "a")
}

func TestTableLoadingServerIsUnavailable(t *testing.T) {
	// A server that restarts loads its snapshot before it serves anything
	// and answers LOADING meanwhile (slowed down per key here so that the
	// test sees it): the table is unavailable, not empty nor fenced, and
	// serves the data loaded, claim included, once the load is done.
	r := testkit.StartRedis(t, testkit.WithRedisPersistence(testkit.RedisRDB),
		testkit.WithRedisArgs("--key-load-delay", "200", "--loading-process-events-interval-bytes", "1024"))
	_, tb := openOrders(t, r)
	const n = 10000
	docs := make([]engine.Doc, 0, batchSize)
	for i := range n {
		docs = append(docs, odoc("k"+strconv.Itoa(i), 0, 1, float64(i), "x"))
		if len(docs) == batchSize {
			tapply(t, tb, 0, int64(i), docs...)
			docs = docs[:0]
		}
	}
	epoch, err := tb.Claim(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil { // saves the snapshot
		t.Fatalf("stop redis-server: %v", err)
	}
	started := make(chan error, 1)
	go func() { started <- r.Start() }()
	var loading error
	testkit.Eventually(t, 30*time.Second, "a reply of a loading server", func() error {
		_, err := tb.Get(ctxT(t), []byte("k1"))
		switch {
		case err == nil:
			return nil // loaded already: checked below
		case strings.Contains(err.Error(), "LOADING"):
			loading = err
			return nil
		}
		return err
	})
	if loading == nil {
		t.Fatal("the server never answered LOADING; the load was too fast to see")
	}
	if !errors.Is(loading, engine.ErrUnavailable) || errors.Is(loading, engine.ErrNotFound) {
		t.Errorf("Get from a loading server = %v; want ErrUnavailable", loading)
	}
	if err := <-started; err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
	if d, err := tb.Get(ctxT(t), []byte("k1")); err != nil || d.Version != 1 {
		t.Fatalf("Get once loaded = %+v, %v; want version 1", d, err)
	}
	if err := tb.Apply(ctxT(t), engine.DocBatch{Partition: 0, Epoch: epoch, Checkpoint: n + 1,
		Docs: []engine.Doc{odoc("k1", 0, 2, -1, "y")}}); err != nil {
		t.Fatalf("Apply with the epoch claimed before the restart: %v", err)
	}
	wantKeys(t, tb, engine.IndexQuery{Index: "total", Limit: 1}, "k1")
}
