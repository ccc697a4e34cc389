package testkit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Environment variables that choose the broker of Kafka and RealKafka.
const (
	// KafkaEnv selects the broker of Kafka: "real" for Apache Kafka,
	// empty or "kfake" for the in-process kfake.
	KafkaEnv = "KEEPSTATE_TEST_KAFKA"
	// BrokersEnv, when set, lists the bootstrap servers (comma separated)
	// of an already running real broker; the Makefile starts one for the
	// whole integration run.
	BrokersEnv = "KEEPSTATE_KAFKA_BROKERS"
)

// kafkaHow tells how to make the real broker available.
const kafkaHow = "run scripts/kafka.sh fetch (needs java and mvn)"

// Kafka returns the bootstrap servers of a broker for a test that must pass
// on both kfake and Apache Kafka: by default a kfake cluster of its own
// (closed by t.Cleanup), with KEEPSTATE_TEST_KAFKA=real RealKafka(t). The
// broker may be shared with other tests and processes, so name topics and
// groups with UniqueName. Safe for parallel tests.
func Kafka(t testing.TB) []string {
	t.Helper()
	switch mode := os.Getenv(KafkaEnv); mode {
	case "", "kfake":
		return StartKfake(t).Brokers()
	case "real":
		return RealKafka(t)
	default:
		t.Fatalf("testkit: %s=%q: want real, kfake or empty", KafkaEnv, mode)
		return nil
	}
}

// RealKafka returns the bootstrap servers of an Apache Kafka broker: those
// of KEEPSTATE_KAFKA_BROKERS (failing the test when it does not answer), or
// else of a broker scripts/kafka.sh starts on the first call for the whole
// test process; Main stops it (or the script, should the process die
// first). Without java or the broker jars the test is skipped (see
// Missing). Name tests that use it TestIntegration* or TestE2E*: the
// Makefile runs those with a broker of its own. Safe for parallel tests.
func RealKafka(t testing.TB) []string {
	t.Helper()
	if env := os.Getenv(BrokersEnv); env != "" {
		brokers := splitBrokers(env)
		if len(brokers) == 0 {
			t.Fatalf("testkit: %s=%q lists no broker", BrokersEnv, env)
		}
		conn, err := net.DialTimeout("tcp", brokers[0], 5*time.Second)
		if err != nil {
			t.Fatalf("testkit: %s=%q: broker does not answer: %v", BrokersEnv, env, err)
		}
		_ = conn.Close()
		return brokers
	}
	b := sharedKafka.use(t, "Apache Kafka", func() (*scriptKafka, string, error) {
		return startScriptKafka("keepstate-kafka-", "start", "stop", 1)
	})
	return slices.Clone(b.brokers)
}

// Main runs the tests of a package (call it from TestMain), stops what
// RealKafka, RealKafkaCluster and the shared Redis setups started, and
// exits.
func Main(m *testing.M) {
	code := m.Run()
	removeBinary()
	if err := errors.Join(StopRealKafka(), StopSharedRedis(), stopKafkaCluster()); err != nil {
		fmt.Fprintln(os.Stderr, "testkit:", err)
	}
	os.Exit(code)
}

// StopRealKafka stops the broker RealKafka started, if any, and removes its
// files; later RealKafka calls fail. Main calls it. Safe to call again.
func StopRealKafka() error {
	return sharedKafka.stop(errors.New("the broker was already stopped (StopRealKafka)"), (*scriptKafka).stop)
}

// sharedKafka is the broker RealKafka starts once per test process.
var sharedKafka sharedOnce[*scriptKafka]

// scriptKafka is Apache Kafka (one broker or a cluster) that scripts/kafka.sh
// runs from dir and stops with the command stopCmd.
type scriptKafka struct {
	script, dir, stopCmd string
	brokers              []string
}

// startScriptKafka starts Apache Kafka with `kafka.sh cmd` in a new
// temporary directory, for this process. The second result says why it
// cannot run here, for Missing.
func startScriptKafka(prefix, cmd, stopCmd string, brokers int, args ...string) (*scriptKafka, string, error) {
	script, missing := findScript()
	if missing == "" {
		missing = checkScript(script)
	}
	if missing != "" {
		return nil, missing, nil
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, "", fmt.Errorf("temp dir: %w", err)
	}
	k := &scriptKafka{script: script, dir: dir, stopCmd: stopCmd}
	if err := k.start(os.Getpid(), brokers, cmd, args...); err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", err
	}
	return k, "", nil
}

// start runs `kafka.sh cmd dir args...` for process owner (the script stops
// what it started on its own once owner has exited) and takes the brokers,
// want of them, that the last line of its output lists.
func (k *scriptKafka) start(owner, want int, cmd string, args ...string) error {
	out, err := runScript(k.script, ownerEnv(owner), append([]string{cmd, k.dir}, args...)...)
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	k.brokers = splitBrokers(lines[len(lines)-1])
	for _, b := range k.brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return fmt.Errorf("kafka.sh %s printed %q, want host:port: %w", cmd, out, err)
		}
	}
	if len(k.brokers) != want {
		return fmt.Errorf("kafka.sh %s printed %q, want %d brokers", cmd, out, want)
	}
	return nil
}

// ownerEnv tells scripts/kafka.sh to stop what it starts once process
// owner has exited.
func ownerEnv(owner int) []string {
	return []string{"KEEPSTATE_KAFKA_OWNER_PID=" + strconv.Itoa(owner)}
}

// stop stops the brokers and removes their directory.
func (k *scriptKafka) stop() error {
	_, err := runScript(k.script, nil, k.stopCmd, k.dir)
	if rmErr := os.RemoveAll(k.dir); err == nil && rmErr != nil {
		err = fmt.Errorf("remove %s: %w", k.dir, rmErr)
	}
	return err
}

// scriptTimeout bounds one call of scripts/kafka.sh (start waits <= 60 s).
const scriptTimeout = 120 * time.Second

// runScript runs scripts/kafka.sh with args, adding env to the environment,
// and returns its standard output.
func runScript(script string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kafka.sh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// findScript locates scripts/kafka.sh, or says why it cannot run here.
func findScript() (string, string) {
	if _, err := exec.LookPath("bash"); err != nil {
		return "", "bash not found"
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err.Error() + ", so no scripts/kafka.sh"
	}
	script := filepath.Join(root, "scripts", "kafka.sh")
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Sprintf("%s not found", script)
	}
	return script, ""
}

// checkScript returns why the broker cannot start here (no java, no jars).
func checkScript(script string) string {
	if _, err := exec.LookPath("java"); err != nil {
		return "java not found; install a JDK 17+ and " + kafkaHow
	}
	if _, err := runScript(script, nil, "check"); err != nil {
		return err.Error() + "; " + kafkaHow
	}
	return ""
}

func splitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// UniqueName returns prefix-<test name>-<random hex> in lower-case letters,
// digits and dashes, at most 100 characters: a Kafka topic, group id,
// instance id or Redis key prefix that differs between calls, tests and
// processes sharing a broker. Safe for concurrent use.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatalf("testkit: random name: %v", err)
	}
	parts := []string{sanitizeName(prefix, 30), sanitizeName(t.Name(), 55), hex.EncodeToString(r[:])}
	return strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), "-")
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// sanitizeName lower-cases s, turns every run of other characters than
// [a-z0-9] into one dash, trims dashes and cuts to max bytes.
func sanitizeName(s string, max int) string {
	s = strings.TrimLeft(nonName.ReplaceAllString(strings.ToLower(s), "-"), "-")
	return strings.Trim(s[:min(len(s), max)], "-")
}
