package app_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestE2ECorruptRebuildKilled kills a keepstate process (SIGKILL) in the
// middle of rebuilding a damaged store: a child process condemns its
// damaged store and exits (--on-store-corrupt=stop, which leaves the
// CORRUPT marker and the files); the next start (rebuild) removes the
// store and then the marker, and is killed the moment the marker is gone,
// while it restores from the changelog or joins its group. The start after
// that finds a store that is new or half restored and must finish the
// restore: ratings produced before, meanwhile and after are counted
// exactly once in the API, the last changelog record and the output topic.
func TestE2ECorruptRebuildKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills child processes")
	}
	cc := newChildCluster(t)
	c := cc.cfg
	truth, sums := map[int64]testkit.Movie{}, map[int64]float64{}
	produce := producerInto(t, c, 4000, truth, sums)
	in := cc.launch("a", true)
	produce(16000, 41)
	waitOutputsExact(t, c, "http://"+in.api, truth, "before any damage")
	if err := in.proc.Stop(30 * time.Second); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	testkit.DamageStore(t, in.dataDir)

	marker := filepath.Join(in.dataDir, "CORRUPT")
	in.extraArgs = []string{"--on-store-corrupt", "stop"}
	cc.start(in)
	if err := in.proc.Wait(90 * time.Second); err == nil {
		t.Fatal("a start with --on-store-corrupt=stop on a damaged store exited 0; want an error")
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("corruption marker after the stop: %v; want it left", err)
	}

	produce(4000, 42)
	in.extraArgs = nil
	cc.start(in)
	// Poll tightly: the rebuild removes the marker right after the store
	// files, when it opens the store, before the jobs restore.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) || in.proc.Exited() {
			t.Fatalf("the rebuild did not remove the corruption marker within 60s (exited: %v)", in.proc.Exited())
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	in.proc.Kill()
	t.Log("killed the rebuild right after it removed the corruption marker")

	produce(4000, 43)
	cc.start(in)
	cc.waitReady(in, 60*time.Second)
	waitOutputsExact(t, c, "http://"+in.api, truth, "after the killed rebuild")
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("corruption marker after the rebuild: %v; want none", err)
	}
}
