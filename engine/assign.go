package engine

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
)

// The assignment plan: which member runs each aggregate partition
// (active), which tail its changelog into their own store (standby), and
// which of those are warm-ups, standbys placed where the balance of
// actives wants the partition to go.
//
// The leader plans from each member's memberState. A member's lag on a
// partition is the best checkpoint any member reported less its own (no
// copy: unbounded); it is caught up within Config.AcceptableLag. Rules:
//
//  1. sticky: a partition stays with the member that ran it, if that
//     member is still in the group and caught up;
//  2. balance: each member has a target of n/k actives (the first n%k,
//     by actives held, one more); a member over target hands a partition
//     to a caught-up member under target, the most caught-up first;
//  3. orphans: to a caught-up member under target, else to the most
//     caught-up member (even over target: never to one that would replay
//     more than the acceptable lag while another need not);
//  4. warm-ups: for each active a member holds beyond its target, a
//     warm-up on a member under target; once caught up, its member asks
//     for a rebalance and rule 2 moves the active;
//  5. standbys: up to Config.StandbyReplicas per partition (warm-ups
//     count), off its active: caught-up members first, then sticky, then
//     the fewest standbys;
//  6. standby balance: see lendStandbys.
//
// On a shared store (Redis) every member is caught up on every partition:
// sticky and balanced, no standbys or warm-ups. The plan is a pure
// function of its input, so every leader computes the same one.

// memberState is what a member reports in its subscription user data.
type memberState struct {
	Addr   string // the advertised address (see Config.AdvertiseAddr)
	Shared bool   // the member's store is shared by every instance
	// Actives are the aggregate partitions it ran in its last generation;
	// Standbys those it kept standby copies of.
	Actives, Standbys []int32
	Copies            map[int32]int64 // each partition its store holds → its checkpoint
	// Inputs are the input partitions it read in its last generation (nil
	// from an older build).
	Inputs []int32
}

// memberPlan is one member's share of a plan.
type memberPlan struct {
	Actives, Standbys, Warmups []int32
}

// userDataMagic starts every user data this engine's assignor writes; a
// member of an older build writes its bare address.
var userDataMagic = []byte("ks\x01")

// errUserData marks user data that is not this assignor's.
var errUserData = errors.New("not keepstate assignor user data")

// encode returns s as subscription user data.
func (s memberState) encode() []byte {
	b := append([]byte(nil), userDataMagic...)
	b = binary.AppendUvarint(b, uint64(len(s.Addr)))
	b = append(b, s.Addr...)
	flags := uint64(0)
	if s.Shared {
		flags = 1
	}
	b = binary.AppendUvarint(b, flags)
	b = appendPartitions(b, s.Actives)
	b = appendPartitions(b, s.Standbys)
	ps := slices.Sorted(maps.Keys(s.Copies))
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for _, p := range ps {
		b = binary.AppendUvarint(b, uint64(p))
		b = binary.AppendVarint(b, s.Copies[p])
	}
	// Inputs come last: an older build's decoder ignores them.
	return appendPartitions(b, s.Inputs)
}

// decodeMemberState reads subscription user data: this assignor's, or an
// older build's bare address (Addr only).
func decodeMemberState(b []byte) (memberState, error) {
	if !bytes.HasPrefix(b, userDataMagic) {
		return memberState{Addr: string(b)}, nil
	}
	r := userDataReader{b: b[len(userDataMagic):]}
	s := memberState{Addr: string(r.bytes())}
	s.Shared = r.uvarint()&1 == 1
	s.Actives = r.partitions()
	s.Standbys = r.partitions()
	n := r.count()
	s.Copies = make(map[int32]int64, n)
	for range n {
		p := r.partition()
		s.Copies[p] = r.varint()
	}
	if len(r.b) > 0 {
		s.Inputs = r.partitions()
	}
	if r.err != nil {
		return memberState{}, r.err
	}
	return s, nil
}

// encode returns mp's standbys and warm-ups as assignment user data.
func (mp memberPlan) encode() []byte {
	b := append([]byte(nil), userDataMagic...)
	b = appendPartitions(b, mp.Standbys)
	return appendPartitions(b, mp.Warmups)
}

// decodeReplicas reads assignment user data written by encode.
func decodeReplicas(b []byte) (standbys, warmups []int32, err error) {
	if !bytes.HasPrefix(b, userDataMagic) {
		return nil, nil, errUserData
	}
	r := userDataReader{b: b[len(userDataMagic):]}
	standbys, warmups = r.partitions(), r.partitions()
	return standbys, warmups, r.err
}

func appendPartitions(b []byte, ps []int32) []byte {
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for _, p := range ps {
		b = binary.AppendUvarint(b, uint64(p))
	}
	return b
}

// userDataReader decodes varints, keeping the first error.
type userDataReader struct {
	b   []byte
	err error
}

func (r *userDataReader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *userDataReader) varint() int64 { return readVarint(r, binary.Varint) }

// readVarint decodes one varint with dec, keeping r's first error.
func readVarint[T uint64 | int64](r *userDataReader, dec func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := dec(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("truncated assignor user data: %w", errUserData)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a length, bounded by the bytes left (each item takes one).
func (r *userDataReader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = cmp.Or(r.err, fmt.Errorf("assignor user data: %d items in %d bytes: %w", n, len(r.b), errUserData))
		return 0
	}
	return int(n)
}

func (r *userDataReader) bytes() []byte {
	n := r.count()
	if r.err != nil {
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *userDataReader) partition() int32 {
	v := r.uvarint()
	if v > math.MaxInt32 {
		r.err = cmp.Or(r.err, fmt.Errorf("assignor user data: partition %d: %w", v, errUserData))
		return 0
	}
	return int32(v)
}

func (r *userDataReader) partitions() []int32 {
	n := r.count()
	ps := make([]int32, 0, n)
	for range n {
		ps = append(ps, r.partition())
	}
	return ps
}

// noCopy is the lag of a member without a copy of the partition.
const noCopy = math.MaxInt64

// planPartitions plans n aggregate partitions over the members (see the
// rules above). ids are the member ids; states what each reported.
func planPartitions(ids []string, states map[string]memberState, n int32, standbys int, acceptableLag int64) map[string]*memberPlan {
	ids = slices.Sorted(slices.Values(ids))
	out := make(map[string]*memberPlan, len(ids))
	for _, id := range ids {
		out[id] = &memberPlan{}
	}
	k := len(ids)
	if k == 0 || n <= 0 {
		return out
	}
	shared := slices.ContainsFunc(ids, func(id string) bool { return states[id].Shared })
	best := make([]int64, n)
	for p := range best {
		best[p] = -1
		for _, id := range ids {
			if off, ok := states[id].Copies[int32(p)]; ok && off > best[p] {
				best[p] = off
			}
		}
	}
	lag := func(id string, p int32) int64 {
		if shared || best[p] < 0 {
			return 0
		}
		off, ok := states[id].Copies[p]
		if !ok {
			return noCopy
		}
		return best[p] - off
	}
	caught := func(id string, p int32) bool { return lag(id, p) <= acceptableLag }

	// Rule 1: sticky.
	owner := make([]string, n)
	count := map[string]int{}
	for _, id := range ids {
		for _, p := range states[id].Actives {
			if p >= 0 && p < n && owner[p] == "" && caught(id, p) {
				owner[p] = id
				count[id]++
			}
		}
	}
	// Targets: n/k each, one more for the first n%k by actives held.
	target := map[string]int{}
	byHeld := slices.Clone(ids)
	slices.SortStableFunc(byHeld, func(a, b string) int { return count[b] - count[a] })
	for i, id := range byHeld {
		target[id] = int(n) / k
		if i < int(n)%k {
			target[id]++
		}
	}
	// better orders candidates for partition p: least lag, then fewest
	// actives, then id.
	better := func(p int32) func(a, b string) int {
		return func(a, b string) int {
			return cmp.Or(cmp.Compare(lag(a, p), lag(b, p)), cmp.Compare(count[a], count[b]), cmp.Compare(a, b))
		}
	}
	// Rule 2: members over target hand partitions to caught-up members
	// under target, the smallest lag first.
	for _, from := range ids {
		for count[from] > target[from] {
			bp, bto := int32(-1), ""
			for p := range n {
				if owner[p] != from {
					continue
				}
				for _, to := range ids {
					if count[to] >= target[to] || !caught(to, p) {
						continue
					}
					if bp < 0 || lag(to, p) < lag(bto, bp) {
						bp, bto = p, to
					}
				}
			}
			if bp < 0 {
				break
			}
			owner[bp] = bto
			count[from]--
			count[bto]++
		}
	}
	// Rule 3: orphans.
	for p := range n {
		if owner[p] != "" {
			continue
		}
		var under, any []string
		for _, id := range ids {
			if caught(id, p) {
				any = append(any, id)
				if count[id] < target[id] {
					under = append(under, id)
				}
			}
		}
		cands := ids
		if len(under) > 0 {
			cands = under
		} else if len(any) > 0 {
			cands = any
		}
		id := slices.MinFunc(cands, better(p))
		owner[p] = id
		count[id]++
	}
	replicas := make([][]string, n)
	// Rule 4: warm-ups for the actives beyond each member's target.
	planned := maps.Clone(count)
	for _, from := range ids {
		extra := count[from] - target[from]
		for p := n - 1; p >= 0 && extra > 0; p-- {
			if owner[p] != from {
				continue
			}
			var to string
			for _, id := range ids {
				if planned[id] < target[id] && (to == "" || planned[id] < planned[to]) {
					to = id
				}
			}
			if to == "" {
				break
			}
			planned[to]++
			extra--
			out[to].Warmups = append(out[to].Warmups, p)
			replicas[p] = append(replicas[p], to)
		}
	}
	for p := range n {
		out[owner[p]].Actives = append(out[owner[p]].Actives, p)
	}
	for _, mp := range out {
		slices.Sort(mp.Warmups)
	}
	if shared {
		return out
	}
	// Rule 5: standbys.
	want := min(standbys, k-1)
	nStandby := map[string]int{}
	// standbyBefore orders candidates: caught up, sticky, fewest standbys,
	// least lag, id. Caught up first: a member back from a restart with a
	// current copy takes the standby from one still replaying, so the next
	// member to stop finds a copy that can take its actives at once.
	standbyBefore := func(a, b string, p int32) bool {
		if ca, cb := caught(a, p), caught(b, p); ca != cb {
			return ca
		}
		if sa, sb := slices.Contains(states[a].Standbys, p), slices.Contains(states[b].Standbys, p); sa != sb {
			return sa
		}
		if nStandby[a] != nStandby[b] {
			return nStandby[a] < nStandby[b]
		}
		return lag(a, p) < lag(b, p)
	}
	// The partitions with the fewest caught-up copies go first: their
	// standbys are forced, and the fewest-standbys tie-break then balances
	// the ones with a choice.
	order := make([]int32, n)
	choices := make([]int, n)
	for p := range n {
		order[p] = p
		for _, id := range ids {
			if id != owner[p] && caught(id, p) {
				choices[p]++
			}
		}
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(choices[a], choices[b]) })
	for _, p := range order {
		for len(replicas[p]) < want {
			var to string
			for _, id := range ids {
				if id == owner[p] || slices.Contains(replicas[p], id) {
					continue
				}
				if to == "" || standbyBefore(id, to, p) {
					to = id
				}
			}
			if to == "" {
				break
			}
			replicas[p] = append(replicas[p], to)
			nStandby[to]++
		}
		for _, id := range replicas[p] {
			out[id].Standbys = append(out[id].Standbys, p)
		}
	}
	for _, mp := range out {
		slices.Sort(mp.Standbys)
	}
	lendStandbys(ids, owner, replicas, nStandby, out)
	return out
}

// lendStandbys is rule 6, standby balance. Caught-up copies win rule 5,
// so standbys gather on the members that held them. While one member keeps
// two or more standbys more than another that warms up nothing, the one
// with the most lends one to the one with the fewest, as an extra replica
// (no partition has fewer caught-up copies meanwhile); once it caught up,
// rule 5 gives the standby to whichever caught-up member has fewer.
func lendStandbys(ids []string, owner []string, replicas [][]string, nStandby map[string]int, out map[string]*memberPlan) {
	held := maps.Clone(nStandby)
	lentOut := map[int]bool{} // partitions lent already
	for {
		from, to := "", ""
		for _, id := range ids {
			if from == "" || held[id] > held[from] {
				from = id
			}
			if len(out[id].Warmups) == 0 && (to == "" || held[id] < held[to]) {
				to = id
			}
		}
		if to == "" || held[from]-held[to] < 2 {
			return
		}
		lent := false
		for p, rs := range replicas {
			if lentOut[p] || owner[p] == to || !slices.Contains(rs, from) || slices.Contains(out[from].Warmups, int32(p)) || slices.Contains(rs, to) {
				continue
			}
			lentOut[p] = true
			out[to].Standbys = append(out[to].Standbys, int32(p))
			slices.Sort(out[to].Standbys)
			held[from]--
			held[to]++
			lent = true
			break
		}
		if !lent {
			return
		}
	}
}

// planInputs spreads n stateless input partitions over the members,
// sticky: every member gets n/len(ids) or one more (the members holding
// the most get more), and keeps up to that many of the ones it read in
// its last generation (states' Inputs, in their order), so that a member
// joining or leaving moves only the partitions it must; a partition moved costs
// its rekey stage a new producer (see park.go). The rest go in turn by
// sorted id. The plan depends only on ids and states.
func planInputs(ids []string, states map[string]memberState, n int32) map[string][]int32 {
	ids = slices.Sorted(slices.Values(ids))
	out := make(map[string][]int32, len(ids))
	if len(ids) == 0 {
		return out
	}
	taken := make([]bool, n)
	prev := make(map[string][]int32, len(ids))
	for _, id := range ids {
		for _, p := range states[id].Inputs {
			if p >= 0 && p < n && !taken[p] {
				taken[p] = true
				prev[id] = append(prev[id], p)
			}
		}
	}
	// The members holding the most get the larger quotas.
	byHeld := slices.Clone(ids)
	slices.SortStableFunc(byHeld, func(a, b string) int { return len(prev[b]) - len(prev[a]) })
	quota := make(map[string]int, len(ids))
	for i, id := range byHeld {
		quota[id] = int(n) / len(ids)
		if i < int(n)%len(ids) {
			quota[id]++
		}
	}
	clear(taken)
	for _, id := range ids {
		keep := prev[id][:min(len(prev[id]), quota[id])]
		out[id] = slices.Clone(keep)
		for _, p := range keep {
			taken[p] = true
		}
	}
	next := 0
	for p := range n {
		if taken[p] {
			continue
		}
		for len(out[ids[next]]) >= quota[ids[next]] {
			next++
		}
		out[ids[next]] = append(out[ids[next]], p)
	}
	for _, id := range ids {
		slices.Sort(out[id])
		if len(out[id]) == 0 {
			delete(out, id)
		}
	}
	return out
}
