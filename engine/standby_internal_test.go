package engine

import (
	"slices"
	"testing"
)

// TestStandbyOfFormerActive: a standby of a partition the last session ran
// here answers at once (read up to its checkpoint) only when the new
// generation directly follows that session's; after a gap (the member was
// paused past the session timeout and the group went on without it) the
// copy is behind and must not answer before its first read of the
// changelog.
func TestStandbyOfFormerActive(t *testing.T) {
	tests := []struct {
		name       string
		gen        int32 // generation of the session after the one at 3
		wantWas    []int32
		wantAnswer bool
	}{
		{"next generation", 4, []int32{0, 1}, true},
		{"a generation missed", 5, nil, false},
		{"same generation again", 3, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &Engine{localStore: true}
			e.copies.set(0, 100)
			e.copies.set(1, 50)
			if was := e.startSession(3, []int32{0, 1}, nil); was != nil {
				t.Fatalf("first session: was = %v, want none", was)
			}
			was := e.startSession(tc.gen, []int32{2}, nil)
			if !slices.Equal(was, tc.wantWas) {
				t.Fatalf("was = %v, want %v", was, tc.wantWas)
			}
			e.setReplicas(was, []int32{2}, []int32{0, 1}, nil)
			defer e.stopReplicas()
			for _, p := range []int32{0, 1} {
				r := e.standby.get(p)
				if r == nil {
					t.Fatalf("partition %d: no standby", p)
				}
				n, _, ok := r.lag(monoNow())
				if ok != tc.wantAnswer || (ok && n != 0) {
					t.Errorf("partition %d: lag = %d, answers %v; want answers %v", p, n, ok, tc.wantAnswer)
				}
			}
		})
	}
}

// TestRestoringFromPromotedUnread: a standby promoted to active before its
// first read (its member back from a restart, its standbys yielding to its
// restores) takes the restore's figures, so the copy answers as a replica
// while the partition restores; one that has read keeps its own.
func TestRestoringFromPromotedUnread(t *testing.T) {
	tests := []struct {
		name        string
		read        bool // the promoted standby read the changelog
		wantRecords int64
	}{
		{"promoted before its first read", false, 346},
		{"promoted after a read", true, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s standbySet
			r := &replica{p: 4}
			if tt.read {
				r.checkpoint.Store(995)
				r.end.Store(1000)
				r.readAt.Store(int64(monoNow()))
			}
			s.promoted = map[int32]*replica{4: r}
			s.restoringFrom(4, 50558, 50904)
			got := s.promotedTo(4)
			records, _, ok := got.lag(monoNow())
			if !ok || records != tt.wantRecords {
				t.Errorf("lag of the copy restoring partition 4 = %d (ok %v), want %d (ok true)", records, ok, tt.wantRecords)
			}
		})
	}
}
