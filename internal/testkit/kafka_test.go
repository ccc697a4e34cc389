package testkit_test

import (
	"fmt"
	"net"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/internal/testkit"
)

func TestUniqueName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	tests := []struct {
		prefix     string
		wantPrefix string
	}{
		{"ratings", "ratings-"},
		{"Movie Stats_Changelog", "movie-stats-changelog-"},
		{"", "testuniquename-"},
		{"--odd..name--", "odd-name-"},
		{strings.Repeat("x", 300), strings.Repeat("x", 30) + "-"},
	}
	for _, tc := range tests {
		t.Run(tc.wantPrefix, func(t *testing.T) {
			a, b := testkit.UniqueName(t, tc.prefix), testkit.UniqueName(t, tc.prefix)
			if a == b {
				t.Errorf("two calls: got %q twice, want different names", a)
			}
			for _, n := range []string{a, b} {
				if !valid.MatchString(n) {
					t.Errorf("UniqueName(%q) = %q: want lower-case letters, digits, single dashes", tc.prefix, n)
				}
				if len(n) > 100 {
					t.Errorf("UniqueName(%q) = %q: %d bytes, want <= 100", tc.prefix, n, len(n))
				}
				if !strings.HasPrefix(n, tc.wantPrefix) {
					t.Errorf("UniqueName(%q) = %q: want prefix %q", tc.prefix, n, tc.wantPrefix)
				}
				if !strings.Contains(n, "testuniquename") {
					t.Errorf("UniqueName(%q) = %q: want the test name in it", tc.prefix, n)
				}
			}
		})
	}
}

// recTB records Fatalf and Skipf instead of ending the real test, so the
// failure paths of Kafka can be checked. Run it with run.
type recTB struct {
	testing.TB
	fatal, skip string
}

func (r *recTB) Helper() {}

func (r *recTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recTB) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recTB on its own goroutine (Goexit ends only that
// goroutine) and returns what f returned and what it recorded.
func run(t *testing.T, f func(testing.TB) []string) ([]string, *recTB) {
	r := &recTB{TB: t}
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = f(r)
	}()
	<-done
	return got, r
}

func TestKafkaModes(t *testing.T) {
	live := testkit.StartKfake(t).Brokers()[0]
	dead := freeAddr(t)
	tests := []struct {
		name      string
		mode      string
		brokers   string
		want      []string // nil: any answering kfake address
		wantFatal string
	}{
		{name: "default is kfake", mode: ""},
		{name: "kfake", mode: "kfake"},
		{name: "unknown mode", mode: "bogus", wantFatal: "KEEPSTATE_TEST_KAFKA"},
		{name: "real uses env brokers", mode: "real", brokers: live + ", other:9092", want: []string{live, "other:9092"}},
		{name: "real env broker down", mode: "real", brokers: dead, wantFatal: "does not answer"},
		{name: "real env lists nothing", mode: "real", brokers: " , ", wantFatal: "lists no broker"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(testkit.KafkaEnv, tc.mode)
			t.Setenv(testkit.BrokersEnv, tc.brokers)
			got, rec := run(t, testkit.Kafka)
			if tc.wantFatal != "" {
				if !strings.Contains(rec.fatal, tc.wantFatal) {
					t.Errorf("fatal: got %q, want it to contain %q", rec.fatal, tc.wantFatal)
				}
				return
			}
			if rec.fatal != "" || rec.skip != "" {
				t.Fatalf("got fatal %q skip %q, want brokers", rec.fatal, rec.skip)
			}
			if tc.want != nil {
				if strings.Join(got, ",") != strings.Join(tc.want, ",") {
					t.Errorf("brokers: got %v, want %v", got, tc.want)
				}
				return
			}
			if len(got) != 1 || got[0] == live {
				t.Fatalf("brokers: got %v, want one new kfake broker", got)
			}
			conn, err := net.DialTimeout("tcp", got[0], time.Second)
			if err != nil {
				t.Fatalf("dial %s: %v", got[0], err)
			}
			conn.Close()
		})
	}
}
