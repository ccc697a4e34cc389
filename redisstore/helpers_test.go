package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keepstate/keepstate/internal/testkit"
)

// prefixSeq makes every test store's prefix unique, so stores sharing one
// redis-server start empty.
var prefixSeq atomic.Int64

func uniquePrefix() string { return fmt.Sprintf("test%d:", prefixSeq.Add(1)) }

// ctxT returns a context that ends with the test, bounded so a hanging call
// fails instead of blocking.
func ctxT(t testing.TB) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// openStore opens a store on r under a fresh prefix and closes it when the
// test ends.
func openStore(t testing.TB, r *testkit.Redis, opts ...Option) *Store {
	t.Helper()
	opts = append([]Option{WithPrefix(uniquePrefix())}, opts...)
	s, err := Open(ctxT(t), r.URL(), opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", r.URL(), err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// redisCmd runs a raw command against r, bypassing the store.
func redisCmd(t testing.TB, r *testkit.Redis, args ...string) string {
	t.Helper()
	var cmds [][]string
	if r.Password() != "" {
		cmds = append(cmds, []string{"AUTH", r.Password()})
	}
	cmds = append(cmds, args)
	got, err := testkit.RedisDo(r.Addr(), 5*time.Second, cmds...)
	if err != nil {
		t.Fatalf("redis %v: %v", args, err)
	}
	return got[len(got)-1]
}
