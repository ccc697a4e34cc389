package app_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestE2EResetRemovesOldStore: a data directory holding a store of the
// old bbolt format (keepstate.db) and nothing else is refused at start
// with an error naming `keepstate reset`; reset deletes it, and the next
// start restores the movies from the changelog, exact.
func TestE2EResetRemovesOldStore(t *testing.T) {
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	c := testConfig(t, brokers, reg.URL())
	in := startInstance(t, c)
	produceJSON(t, c, `{"movie_id":362,"rating":10}`, `{"movie_id":362,"rating":8}`)
	waitMovie(t, in.api, movie{MovieID: 362, Rating: 9.0, Count: 2}, 30*time.Second)
	in.stop(t)

	// The directory as a build from before the Pebble engine left it.
	if err := os.RemoveAll(c.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(c.DataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.DataDir, "keepstate.db"), []byte("a bbolt file of format v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := app.Run(ctx, c, testLogger(t, "old"), nil)
	if !errors.Is(err, docstore.ErrOldStore) || !strings.Contains(err.Error(), "keepstate reset") {
		t.Fatalf("start on an old store: %v; want docstore.ErrOldStore naming `keepstate reset`", err)
	}
	testkit.Eventually(t, 60*time.Second, "reset succeeds once the instance left", func() error {
		return app.Reset(ctx, c, false, testLogger(t, "reset"))
	})
	if _, err := os.Stat(filepath.Join(c.DataDir, "keepstate.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("keepstate.db after reset: %v; want it deleted", err)
	}
	in = startInstance(t, c)
	waitMovie(t, in.api, movie{MovieID: 362, Rating: 9.0, Count: 2}, 30*time.Second)
}
