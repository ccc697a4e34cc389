package docstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// writeV1Store writes dir/keepstate.db as keepstate wrote its store before
// the Pebble engine (format v1): a bbolt file with the buckets meta (the
// format marker), clover, checkpoints and epochs.
func writeV1Store(t *testing.T, dir string) {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(dir, dbFileV1), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		partition, value := binary.BigEndian.AppendUint32(nil, 2), binary.BigEndian.AppendUint64(nil, 7)
		for name, kv := range map[string][2][]byte{
			"meta":        {[]byte("format"), []byte("keepstate-docstore v1")},
			"clover":      {[]byte("c:movies"), []byte("{}")},
			"checkpoints": {partition, value},
			"epochs":      {partition, value},
		} {
			b, err := tx.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			if err := b.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefusesOldStore opens data directories that hold a keepstate.db
// and no Pebble store: Open must fail with ErrOldStore, say what the file
// is and how to go on, and leave the directory as it was; RemoveOldStore
// then clears the way and Open makes a new store.
func TestOpenRefusesOldStore(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"v1 store", writeV1Store},
		{"unreadable keepstate.db", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, dbFileV1), strings.Repeat("garbage ", 2000))
		}},
		{"v1 store with an interrupted migration", func(t *testing.T, dir string) {
			writeV1Store(t, dir)
			if err := os.Mkdir(filepath.Join(dir, "store.migrating"), 0o750); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, filepath.Join(dir, "store.migrating", "000001.log"), "torn")
		}},
		{"v1 store with an empty store directory", func(t *testing.T, dir string) {
			writeV1Store(t, dir)
			if err := os.Mkdir(filepath.Join(dir, storeDir), 0o750); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			oldPath := filepath.Join(dir, dbFileV1)
			old, err := os.ReadFile(oldPath)
			if err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, dir)

			s, err := Open(dir, WithLockTimeout(200*time.Millisecond))
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) succeeded; want ErrNotStore", dir)
			}
			if !errors.Is(err, ErrOldStore) || !errors.Is(err, ErrNotStore) {
				t.Errorf("Open(%s) = %v; want ErrOldStore, an ErrNotStore", dir, err)
			}
			for _, want := range []string{
				dir,
				"holds keepstate.db, a store from before the Pebble engine, which this version no longer reads",
				"run `keepstate reset`",
				"restores the state from the changelog",
			} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Open error %q does not contain %q", err, want)
				}
			}
			got, err := os.ReadFile(oldPath)
			if err != nil {
				t.Fatalf("%s after Open: %v; want it untouched", dbFileV1, err)
			}
			if !bytes.Equal(got, old) {
				t.Errorf("%s after Open: %d bytes differ from the %d written; want it untouched", dbFileV1, len(got), len(old))
			}
			if after := snapshot(t, dir); !maps.Equal(before, after) {
				t.Errorf("Open modified the directory:\nbefore %v\nafter  %v", before, after)
			}
			if removed, err := RemoveOldStore(dir); err != nil || !removed {
				t.Fatalf("RemoveOldStore = %v, %v; want true, nil", removed, err)
			}
			if removed, err := RemoveOldStore(dir); err != nil || removed {
				t.Errorf("RemoveOldStore again = %v, %v; want false, nil", removed, err)
			}
			s, err = Open(dir, WithLockTimeout(200*time.Millisecond), WithFsync(false))
			if err != nil {
				t.Fatalf("Open after RemoveOldStore: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOpenLeavesOldStoreBesideStore opens a store next to a keepstate.db
// (an older version migrated the store and did not remove the file): Open
// uses the Pebble store, and the old file stays as it is.
func TestOpenLeavesOldStoreBesideStore(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(dir, WithFsync(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mustTable(t, s, ordersSpec).Claim(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	writeV1Store(t, dir)
	oldPath := filepath.Join(dir, dbFileV1)
	old, err := os.ReadFile(oldPath)
	if err != nil {
		t.Fatal(err)
	}

	s, err = Open(dir, WithFsync(false))
	if err != nil {
		t.Fatalf("Open of a store beside a keepstate.db: %v", err)
	}
	defer s.Close()
	if e, err := mustTable(t, s, ordersSpec).Claim(ctx, 2); err != nil || e != 2 {
		t.Errorf("second Claim of partition 2 = %d, %v; want 2, nil (the Pebble store's epochs)", e, err)
	}
	got, err := os.ReadFile(oldPath)
	if err != nil || !bytes.Equal(got, old) {
		t.Errorf("%s after Open: %d bytes, %v; want the %d written, untouched", dbFileV1, len(got), err, len(old))
	}
}
