package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestDemoAnswersProducesAndRestartsWithoutReplay runs the demo binary: it
// answers GET /movies/{id} for generated movies within 10 s, `keepstate
// produce` can send to its broker and registry from another process, and a
// restarted demo keeps its data and answers without a changelog replay.
func TestDemoAnswersProducesAndRestartsWithoutReplay(t *testing.T) {
	bin := testkit.Keepstate(t)
	dir := t.TempDir()
	kafka, reg, api := testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t)
	demo := func(name string, rate string) *testkit.Process {
		return testkit.StartProcess(t, name, bin, nil, "demo", "--data-dir", dir, "--kafka-addr", kafka,
			"--registry-addr", reg, "--http-addr", api, "--rate", rate, "--movies", "50", "--commit-interval", "200ms")
	}
	began := time.Now()
	first := demo("demo-1", "200")
	var m testkit.Movie
	testkit.Eventually(t, 10*time.Second, "demo answers GET /movies/1 within 10s of starting", func() error {
		code, err := testkit.GetJSON("http://"+api+"/movies/1", &m)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("code %d err %v", code, err)
		}
		return nil
	})
	t.Logf("demo answered after %v: %+v", time.Since(began).Round(time.Millisecond), m)

	out := testkit.StartProcess(t, "produce", bin, nil, "produce", "--brokers", kafka,
		"--schema-registry", "http://"+reg, "--count", "200", "--movies", "5", "--seed", "7")
	if err := out.Wait(60 * time.Second); err != nil {
		t.Fatalf("keepstate produce against the demo: %v\n%s", err, out.Output())
	}

	if err := first.Stop(30 * time.Second); err != nil {
		t.Fatalf("demo did not stop cleanly: %v", err)
	}
	var before testkit.Movie
	second := demo("demo-2", "0")
	testkit.Eventually(t, 20*time.Second, "restarted demo ready", func() error {
		code, err := testkit.GetJSON("http://"+api+"/movies/1", &before)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("code %d err %v", code, err)
		}
		if code, _ := testkit.GetJSON("http://"+api+"/readyz", nil); code != http.StatusOK {
			return fmt.Errorf("readyz %d", code)
		}
		return nil
	})
	if before.Count < m.Count {
		t.Errorf("restarted demo lost data: movie 1 count %d, had %d before the restart", before.Count, m.Count)
	}
	var st testkit.APIStats[engine.Stats]
	if _, err := testkit.GetJSON("http://"+api+"/api/stats", &st); err != nil {
		t.Fatal(err)
	}
	if st.Stats.ChangelogRestored != 0 {
		t.Errorf("restarted demo replayed %d changelog records, want 0", st.Stats.ChangelogRestored)
	}
	if st.Stats.PartitionsRunning == 0 {
		t.Errorf("restarted demo runs no partition: %+v", st)
	}
	_ = second.Stop(30 * time.Second)
}
