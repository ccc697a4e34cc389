package testkit

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSanitizeName(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"TestFoo/sub_case#01", 50, "testfoo-sub-case-01"},
		{"--a--b--", 50, "a-b"},
		{"abcdef", 3, "abc"},
		{"ab-cd", 3, "ab"},
		{"", 10, ""},
		{"ÄÖÜ", 10, ""},
	}
	for _, tc := range tests {
		if got := sanitizeName(tc.in, tc.max); got != tc.want {
			t.Errorf("sanitizeName(%q, %d): got %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

// TestCheckScriptWithoutJars checks that an empty jar cache is reported as
// missing, with the command that fetches the jars.
func TestCheckScriptWithoutJars(t *testing.T) {
	script, missing := findScript()
	if missing != "" {
		t.Fatalf("findScript: %s", missing)
	}
	if filepath.Base(filepath.Dir(script)) != "scripts" {
		t.Errorf("findScript: got %s, want .../scripts/kafka.sh", script)
	}
	t.Setenv("KEEPSTATE_KAFKA_CACHE", t.TempDir())
	if got := checkScript(script); !strings.Contains(got, "scripts/kafka.sh fetch") {
		t.Errorf("checkScript with an empty cache: got %q, want it to name scripts/kafka.sh fetch", got)
	}
}

// alive reports whether process pid runs and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || !strings.HasPrefix(string(stat[i+1:]), " Z")
}

func brokerPid(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	return pid
}

// TestIntegrationKafkaScript starts an Apache Kafka broker with
// scripts/kafka.sh for an owner process, checks it answers, and checks the
// script stops it once the owner exits (the path that keeps a test binary
// killed by a timeout from leaking a broker). It runs in the integration
// pass only, where the jars are fetched; a start takes 10-20 s.
func TestIntegrationKafkaScript(t *testing.T) {
	if os.Getenv(KafkaEnv) != "real" {
		t.Skipf("runs with %s=real (make integration)", KafkaEnv)
	}
	script, missing := findScript()
	if missing == "" {
		missing = checkScript(script)
	}
	if missing != "" {
		Missing(t, "Apache Kafka", missing)
	}

	owner := exec.Command("sleep", "600")
	if err := owner.Start(); err != nil {
		t.Fatalf("start owner: %v", err)
	}
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })
	dir, err := os.MkdirTemp("", "keepstate-kafka-test-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	b := &scriptKafka{script: script, dir: dir, stopCmd: "stop"}
	if err := b.start(owner.Process.Pid, 1, "start"); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = b.stop() })

	port, err := os.ReadFile(filepath.Join(dir, "port"))
	if err != nil {
		t.Fatalf("port file: %v", err)
	}
	if want := "127.0.0.1:" + strings.TrimSpace(string(port)); len(b.brokers) != 1 || b.brokers[0] != want {
		t.Fatalf("brokers: got %v, want [%s]", b.brokers, want)
	}
	pid := brokerPid(t, dir)
	if !alive(pid) {
		t.Fatalf("broker pid %d is not running after start", pid)
	}
	conn, err := net.DialTimeout("tcp", b.brokers[0], 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", b.brokers[0], err)
	}
	conn.Close()

	_ = owner.Process.Kill()
	_ = owner.Wait()
	Eventually(t, 30*time.Second, "broker stopped after its owner exited", func() error {
		if alive(pid) {
			return fmt.Errorf("broker pid %d still runs", pid)
		}
		return nil
	})
	if conn, err := net.DialTimeout("tcp", b.brokers[0], time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after the broker stopped", b.brokers[0])
	}
	if err := b.stop(); err != nil {
		t.Errorf("stop of a stopped broker: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("broker dir after stop: got %v, want it removed", err)
	}
}
