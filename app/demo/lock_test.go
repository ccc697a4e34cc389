package demo_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/app/demo"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestDemoLocksDataDirFirst starts a demo, then a second one on the same
// --data-dir whose --kafka-addr is taken: it must fail on the data-dir
// lock, before it even tries to start its broker (which would write into
// the live broker's directory).
func TestDemoLocksDataDirFirst(t *testing.T) {
	dir := t.TempDir()
	first := demo.Default()
	first.DataDir, first.HTTPAddr, first.Rate = dir, "127.0.0.1:0", 0
	// Port 0: the demo binds ephemeral ports itself, so no other test can
	// take them between choosing and listening (a free port picked in
	// advance was once taken by a parallel test in CI).
	first.KafkaAddr, first.RegistryAddr = "127.0.0.1:0", "127.0.0.1:0"
	out := &testkit.SyncBuffer{}
	first.Out = out
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- demo.Run(ctx, first, testkit.Logger(t, "first demo")) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("first demo: %v", err)
		}
	}()
	testkit.Eventually(t, 60*time.Second, "first demo running", func() error {
		if !strings.Contains(out.String(), "is running") {
			return errors.New("no banner yet")
		}
		return nil
	})

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	second := first
	second.Out = &testkit.SyncBuffer{}
	second.KafkaAddr, second.RegistryAddr = taken.Addr().String(), "127.0.0.1:0"
	start := time.Now()
	err = demo.Run(context.Background(), second, testkit.Logger(t, "second demo"))
	if !errors.Is(err, app.ErrConfig) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second demo on the same --data-dir = %v, want ErrConfig naming the data dir in use (before any broker starts)", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("second demo took %v to fail", d)
	}
}
