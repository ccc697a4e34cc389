package docstore

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// TestPriorSlabMatchesMap applies random sets, deletions and evictions to
// a slab and to a map, and checks after each that they hold the same
// entries; with a hash of 3 bits most keys share their hash with others.
// The data get returned must stay as it was while later entries replace,
// remove and compact (copy) what the slab holds.
func TestPriorSlabMatchesMap(t *testing.T) {
	for _, mask := range []uint64{^uint64(0), 7} {
		t.Run(fmt.Sprintf("mask %x", mask), func(t *testing.T) {
			m := priorSlab{index: map[uint64]int32{}, seed: maphash.MakeSeed(), mask: mask}
			want := map[string]tablePrior{}
			type held struct {
				data, copied []byte
			}
			var kept []held
			written := 0
			rng := rand.New(rand.NewPCG(1, 2))
			for op := range 40000 {
				key := fmt.Sprintf("k%d", rng.IntN(300))
				switch r := rng.IntN(10); {
				case r < 6:
					p := tablePrior{priorHead: priorHead{exists: true, version: int64(op), part: int32(r)},
						data: bytes.Repeat([]byte{byte(op)}, rng.IntN(200))}
					if fresh, had := m.set(key, p), want[key].exists; fresh == had {
						t.Fatalf("set(%s) reported new %v; the map held it: %v", key, fresh, had)
					}
					want[key] = p
					written += len(key) + len(p.data)
				case r < 9:
					_, had := want[key]
					if m.del(key) != had {
						t.Fatalf("del(%s) != %v", key, had)
					}
					delete(want, key)
				default:
					for _, k := range m.evict(1 + rng.IntN(20)) {
						if _, ok := want[k]; !ok {
							t.Fatalf("evicted %s, not held", k)
						}
						delete(want, k)
					}
				}
				if p, ok := m.get(key); ok && op%7 == 0 {
					kept = append(kept, held{p.data, bytes.Clone(p.data)})
				}
				if m.len() != len(want) {
					t.Fatalf("op %d: %d entries; want %d", op, m.len(), len(want))
				}
			}
			arena := 0
			for _, c := range m.arena {
				arena += len(c)
			}
			if arena != m.live+m.dead || arena >= written {
				t.Errorf("arena of %d bytes (%d live, %d dead) after %d written: want it compacted", arena, m.live, m.dead, written)
			}
			n := 0
			for k, p := range m.all() {
				n++
				w, ok := want[k]
				if g, _ := m.get(k); !ok || p.priorHead != w.priorHead || !bytes.Equal(p.data, w.data) || g.priorHead != w.priorHead {
					t.Fatalf("entry %s = %+v; want %+v (held %v)", k, p, w, ok)
				}
			}
			if n != len(want) {
				t.Fatalf("all yields %d entries; want %d", n, len(want))
			}
			for _, h := range kept {
				if !bytes.Equal(h.data, h.copied) {
					t.Fatal("data returned by get changed later")
				}
			}
		})
	}
}
