package docstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestHalfCreatedStore checks Open on a store directory a crash left while
// Pebble was creating it (files, no manifest, no table): it is made again,
// where before a kill -9 in that window made every later start fail with
// ErrNotStore ("database does not exist"; found by killing a rebuild,
// TestE2ECorruptRebuildKilled). A directory with a table file and no
// manifest is a damaged store and stays refused, its files kept.
func TestHalfCreatedStore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   []string
		wantErr error
	}{
		{"lock and options only", []string{"LOCK", "OPTIONS-000002"}, nil},
		{"a write-ahead log but no manifest", []string{"LOCK", "000002.log"}, nil},
		{"a table file but no manifest", []string{"LOCK", "000005.sst"}, ErrNotStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, storeDir)
			if err := os.MkdirAll(path, 0o750); err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.files {
				if err := os.WriteFile(filepath.Join(path, f), nil, 0o640); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Open(dir)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Open = %v; want %v", err, tc.wantErr)
				}
				for _, f := range tc.files {
					if _, err := os.Stat(filepath.Join(path, f)); err != nil {
						t.Errorf("%s after the refused Open: %v; want it kept", f, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Open = %v; want a new store", err)
			}
			defer s.Close()
			ctx := context.Background()
			tb := mustTable(t, s, ordersSpec)
			if _, err := tb.Claim(ctx, 0); err != nil {
				t.Fatalf("Claim on the remade store: %v", err)
			}
			if _, ok, err := tb.Checkpoint(ctx, 0); err != nil || ok {
				t.Errorf("Checkpoint(0) = ok %v, err %v; want none in a new store", ok, err)
			}
		})
	}
}
