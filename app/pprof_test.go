package app_test

import (
	"net/http"
	"testing"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestPprofIsOptInAndOffTheAPIPort: with --pprof-addr the profiler answers
// on that address; the API port never serves it.
func TestPprofIsOptInAndOffTheAPIPort(t *testing.T) {
	brokers := testkit.Kafka(t)
	reg := testkit.StartRegistry(t)
	c := testConfig(t, brokers, reg.URL())
	c.PprofAddr = testkit.FreeAddr(t)
	in := startInstance(t, c)
	tests := []struct {
		name, url string
		want      int
	}{
		{"profiler on --pprof-addr", "http://" + c.PprofAddr + "/debug/pprof/cmdline", http.StatusOK},
		{"profile index on --pprof-addr", "http://" + c.PprofAddr + "/debug/pprof/", http.StatusOK},
		{"not on the API port", in.api + "/debug/pprof/cmdline", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, body := httpGet(tt.url); code != tt.want {
				t.Errorf("GET %s = %d %.100s, want %d", tt.url, code, body, tt.want)
			}
		})
	}
}
