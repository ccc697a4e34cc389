package web

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/keepstate/keepstate/engine"
)

// item is a gathered value: the partition it belongs to and its order.
type item struct{ p, v int32 }

// TestGather checks the merge both the movie range and the table query
// use: peers are asked only for partitions this instance did not answer,
// a partition claimed by two answers keeps the first one's items, a peer
// that fails costs exactly its partitions, the page is sorted and cut at
// the limit (which sets more), and only no answer at all is an error.
func TestGather(t *testing.T) {
	down := errors.New("down")
	page := func(covered []int32, more bool, items ...item) peerPage[item] {
		return peerPage[item]{items: items, more: more, covered: covered}
	}
	mem := engine.Membership{Self: "a", Partitions: 4, Owners: map[int32]string{0: "a", 1: "b", 2: "b", 3: "c"}}
	for _, tc := range []struct {
		name        string
		local       peerPage[item]
		peers       map[string]peerPage[item] // missing: the peer fails
		limit       int
		want        []item
		wantMore    bool
		wantMissing []int32
		wantErr     bool
	}{
		{
			name:  "every partition answered, sorted",
			local: page([]int32{0}, false, item{0, 5}, item{0, 1}),
			peers: map[string]peerPage[item]{"b": page([]int32{1, 2}, false, item{1, 3}, item{2, 9}), "c": page([]int32{3}, false, item{3, 2})},
			limit: 10,
			want:  []item{{0, 1}, {3, 2}, {1, 3}, {0, 5}, {2, 9}},
		},
		{
			name:     "cut at the limit",
			local:    page([]int32{0}, false, item{0, 5}, item{0, 1}),
			peers:    map[string]peerPage[item]{"b": page([]int32{1, 2}, false, item{1, 3}), "c": page([]int32{3}, false, item{3, 2})},
			limit:    2,
			want:     []item{{0, 1}, {3, 2}},
			wantMore: true,
		},
		{
			name:     "a peer with more",
			local:    page([]int32{0}, false),
			peers:    map[string]peerPage[item]{"b": page([]int32{1, 2}, true, item{1, 3}), "c": page([]int32{3}, false)},
			limit:    10,
			want:     []item{{1, 3}},
			wantMore: true,
		},
		{
			name:        "a failed peer costs its partitions",
			local:       page([]int32{0}, false, item{0, 5}),
			peers:       map[string]peerPage[item]{"c": page([]int32{3}, false, item{3, 2})},
			limit:       10,
			want:        []item{{3, 2}, {0, 5}},
			wantMissing: []int32{1, 2},
		},
		{
			name:  "a partition answered locally is not taken from a peer",
			local: page([]int32{0, 1}, false, item{0, 5}, item{1, 7}),
			peers: map[string]peerPage[item]{"b": page([]int32{1, 2}, false, item{1, 6}, item{2, 9}), "c": page([]int32{3}, false)},
			limit: 10,
			want:  []item{{0, 5}, {1, 7}, {2, 9}},
		},
		{
			name:    "nothing answered",
			local:   page(nil, false),
			limit:   10,
			wantErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := gather(context.Background(), scatter[item]{
				mem:   mem,
				local: tc.local,
				ask: func(_ context.Context, addr string) (peerPage[item], error) {
					if addr == "a" {
						return peerPage[item]{}, errors.New("asked itself")
					}
					pp, ok := tc.peers[addr]
					if !ok {
						return pp, down
					}
					return pp, nil
				},
				partition: func(it item) int32 { return it.p },
				less:      func(a, b item) bool { return cmp.Less(a.v, b.v) },
				limit:     tc.limit,
				warn:      func(string, error) {},
			})
			if tc.wantErr {
				if !errors.Is(err, engine.ErrUnavailable) {
					t.Fatalf("gather = %v, %v; want ErrUnavailable", g, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(g.items, tc.want) || g.more != tc.wantMore || !slices.Equal(g.missing, tc.wantMissing) {
				t.Errorf("gather = items %v more %v missing %v; want %v %v %v", g.items, g.more, g.missing, tc.want, tc.wantMore, tc.wantMissing)
			}
		})
	}
}
