package docstore

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
)

// commitFaultKV fails the commit numbered failAt (1-based, counting every
// batch's commit) and every commit after it, as a crash there would: what
// committed before stays.
type commitFaultKV struct {
	kv
	failAt  int64
	commits atomic.Int64
}

func (f *commitFaultKV) batch() kvBatch { return &commitFaultBatch{kvBatch: f.kv.batch(), f: f} }
func (f *commitFaultKV) writeBatch(size int) kvBatch {
	return &commitFaultBatch{kvBatch: f.kv.writeBatch(size), f: f}
}

type commitFaultBatch struct {
	kvBatch
	f *commitFaultKV
}

func (b *commitFaultBatch) commit(sync bool) error {
	if b.f.commits.Add(1) >= b.f.failAt {
		return errInjected
	}
	return b.kvBatch.commit(sync)
}

// withCommitFault opens the store on Pebble with the commits from failAt
// on failing.
func withCommitFault(failAt int64) Option {
	return func(o *options) {
		o.openKV = func(path string, o options, log *slog.Logger, mustExist bool) (kv, error) {
			p, err := openPebble(path, o, log, mustExist)
			if err != nil {
				return nil, err
			}
			return &commitFaultKV{kv: p, failAt: failAt}, nil
		}
	}
}

// TestMigrateCrash interrupts the migration of the fixture at each of its
// commits (in copy batches of 500 documents: begin, 4 copies, finish),
// once or twice in a row: the failed Open leaves the store as the last
// commit did, and the next Open completes the migration, exactly.
func TestMigrateCrash(t *testing.T) {
	defer func(n int) { migrateBatchDocs = n }(migrateBatchDocs)
	migrateBatchDocs = 500
	const commits = 6
	cases := [][]int64{{2, 4}, {4, 3}, {6, 1}}
	for at := range int64(commits) {
		cases = append(cases, []int64{at + 1})
	}
	if testing.Short() {
		cases = [][]int64{{3}, {2, 4}}
	}
	t.Run("commits", func(t *testing.T) {
		dir, _ := loadFixture(t)
		s, err := openMigrating(t, dir, nil, withCommitFault(commits+1))
		if err != nil {
			t.Fatalf("Open with commit %d failing = %v; want the migration done in %d commits", commits+1, err, commits)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
	for _, crashes := range cases {
		t.Run(fmt.Sprint(crashes), func(t *testing.T) {
			dir, want := loadFixture(t)
			for _, at := range crashes {
				_, err := openMigrating(t, dir, nil, withCommitFault(at))
				if !errors.Is(err, errInjected) {
					t.Fatalf("Open with commit %d failing = %v; want the injected failure", at, err)
				}
			}
			s, err := openMigrating(t, dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if hasOldKeys(t, s) {
				t.Fatal("keys of the movie layout left after the migration")
			}
			checkMigrated(t, s, want)
			checkOrders(t, s, want.Orders)
		})
	}
}
