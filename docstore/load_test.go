package docstore

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// TestTableLoadPathsAgree checks Load's iterator path (seekLoadMin keys
// or more) against its point reads, keys out of order, repeated and
// missing, with the write cache emptied so that both read the store.
func TestTableLoadPathsAgree(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, WithFsync(false))
	defer s.Close()
	tb := mustTable(t, s, ordersSpec)
	<-tb.cache.warmed // of the empty table: it adds nothing later
	fillTable(t, tb, 3000, 500)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{seekLoadMin - 1, seekLoadMin, 100, 1000} {
		keys := make([][]byte, n)
		for i := range keys {
			keys[i] = orderDoc(rng.IntN(3500), 0, 1).Key // 3000 and above: missing
		}
		keys[n-1] = keys[0] // one repeated
		s.wmu.Lock()
		s.tcache.clear(tb.cache)
		s.wmu.Unlock()
		got, err := tb.Load(ctx, keys)
		if err != nil {
			t.Fatalf("Load(%d keys): %v", n, err)
		}
		want := map[string]engine.Doc{}
		for _, k := range keys {
			s.wmu.Lock()
			s.tcache.clear(tb.cache)
			s.wmu.Unlock()
			one, err := tb.Load(ctx, [][]byte{k}) // a point read
			if err != nil {
				t.Fatal(err)
			}
			for k, d := range one {
				want[k] = d
			}
		}
		if len(got) != len(want) {
			t.Fatalf("Load(%d keys) found %d documents, point reads %d", n, len(got), len(want))
		}
		for k, w := range want {
			if g, ok := got[k]; !ok || !sameTableDoc(g, w) {
				t.Errorf("Load(%d keys)[%q] = %+v (found %v), want %+v", n, k, g, ok, w)
			}
		}
	}
}
