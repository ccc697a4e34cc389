package engine

import (
	"slices"
	"testing"
	"time"
)

// TestHandOverGathersWarmups: a member with two warm-ups (0 and 1, the
// acceptable lag 100 records) rejoins the group for them together when
// both are ready, waits for a warm-up still behind for a quarter of the
// time the first took to catch up (within gatherMin and gatherMax), and
// rejoins at most every minRejoinGap, and never while one of its actives
// restores.
func TestHandOverGathersWarmups(t *testing.T) {
	const s = time.Second
	type step struct {
		at         time.Duration // since the first step
		lags       map[int32]int64
		wantRejoin bool
		wantReady  []int32
		restoring  bool // an active of the member restores
	}
	tests := []struct {
		name    string
		warmFor time.Duration // how long the warm-ups ran before the first step
		steps   []step
	}{
		{"both ready at once", 40 * s, []step{
			{0, map[int32]int64{0: 0, 1: 100}, true, []int32{0, 1}, false},
		}},
		{"neither ready", 40 * s, []step{
			{0, map[int32]int64{0: 101, 1: 5000}, false, nil, false},
			{time.Minute, map[int32]int64{0: 101, 1: 5000}, false, nil, false},
		}},
		{"one behind: waits a quarter of the warm-up, then hands the ready one over", 40 * s, []step{
			{0, map[int32]int64{0: 0, 1: 5000}, false, []int32{0}, false},
			{10*s - 1, map[int32]int64{0: 0, 1: 3000}, false, []int32{0}, false},
			{10 * s, map[int32]int64{0: 0, 1: 2000}, true, []int32{0}, false},
		}},
		{"one behind, then ready within the wait", 40 * s, []step{
			{0, map[int32]int64{0: 0, 1: 5000}, false, []int32{0}, false},
			{3 * s, map[int32]int64{0: 0, 1: 10}, true, []int32{0, 1}, false},
		}},
		{"a short warm-up waits gatherMin", 2 * s, []step{
			{0, map[int32]int64{0: 0, 1: 5000}, false, []int32{0}, false},
			{gatherMin, map[int32]int64{0: 0, 1: 5000}, true, []int32{0}, false},
		}},
		{"a long warm-up waits gatherMax", 10 * time.Minute, []step{
			{0, map[int32]int64{0: 0, 1: 5000}, false, []int32{0}, false},
			{gatherMax - 1, map[int32]int64{0: 0, 1: 5000}, false, []int32{0}, false},
			{gatherMax, map[int32]int64{0: 0, 1: 5000}, true, []int32{0}, false},
		}},
		{"not while an active restores", 40 * s, []step{
			{0, map[int32]int64{0: 0, 1: 0}, false, nil, true},
			{time.Minute, map[int32]int64{0: 0, 1: 0}, false, nil, true},
			{time.Minute + 1, map[int32]int64{0: 0, 1: 0}, true, []int32{0, 1}, false},
		}},
		{"rejoins at most every minRejoinGap", 2 * s, []step{
			{0, map[int32]int64{0: 0, 1: 5000}, false, []int32{0}, false},
			{gatherMin, map[int32]int64{0: 0, 1: 5000}, true, []int32{0}, false},
			{gatherMin + s/2, map[int32]int64{1: 0}, false, []int32{1}, false},
			{gatherMin + minRejoinGap, map[int32]int64{1: 0}, true, []int32{1}, false},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &Engine{localStore: true}
			e.cfg.AcceptableLag = 100
			e.setReplicas(nil, nil, []int32{0, 1}, []int32{0, 1})
			defer e.stopReplicas()
			base := time.Hour
			for _, p := range []int32{0, 1} {
				e.standby.get(p).warmSince.Store(int64(base - tc.warmFor))
			}
			for i, st := range tc.steps {
				now := base + st.at
				for p, lag := range st.lags {
					r := e.standby.get(p)
					r.end.Store(10_000)
					r.checkpoint.Store(10_000 - lag)
					r.readAt.Store(int64(now))
				}
				e.c.assigned.Store(2)
				e.c.running.Store(map[bool]int64{true: 1, false: 2}[st.restoring])
				ready, rejoin := e.handOver(now)
				var got []int32
				for _, r := range ready {
					got = append(got, r.p)
				}
				slices.Sort(got)
				if rejoin != st.wantRejoin || !slices.Equal(got, st.wantReady) {
					t.Fatalf("step %d (+%v): ready %v, rejoin %v; want ready %v, rejoin %v", i, st.at, got, rejoin, st.wantReady, st.wantRejoin)
				}
				if rejoin {
					for _, p := range got {
						if e.standby.get(p).warmup.Load() {
							t.Errorf("step %d: partition %d still a warm-up after its hand-over", i, p)
						}
					}
				}
			}
		})
	}
}
