package main

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/cli"
	"github.com/keepstate/keepstate/internal/testkit"
)

func TestEnvFillsUnsetFlagsAndFlagsWin(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		wantStore string
		wantAddr  string
	}{
		{"defaults", nil, nil, "clover", ":7001"},
		{"env only", map[string]string{"KEEPSTATE_STORE": "redis", "KEEPSTATE_HTTP_ADDR": ":9000"}, nil, "redis", ":9000"},
		{"flag wins over env", map[string]string{"KEEPSTATE_STORE": "redis"}, []string{"--store", "clover"}, "clover", ":7001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			cfg := app.Default()
			cli.CommonFlags(fs, &cfg)
			if err := cli.Parse(fs, tt.args); err != nil {
				t.Fatalf("parse: %v", err)
			}
			if cfg.Store != tt.wantStore || cfg.HTTPAddr != tt.wantAddr {
				t.Errorf("store %q addr %q, want %q %q", cfg.Store, cfg.HTTPAddr, tt.wantStore, tt.wantAddr)
			}
		})
	}
}

func TestEnvNameOfEveryFlag(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	cfg := app.Default()
	cli.CommonFlags(fs, &cfg)
	fs.VisitAll(func(f *flag.Flag) {
		want := "KEEPSTATE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if got := cli.EnvName(f.Name); got != want {
			t.Errorf("cli.EnvName(%q) = %q, want %q", f.Name, got, want)
		}
	})
}

// TestExitCodesAndMessages: bad configuration and unreachable services
// exit with code 2 and a one-line message naming the thing and how to fix it.
func TestExitCodesAndMessages(t *testing.T) {
	reg := testkit.StartRegistry(t)
	dead := testkit.FreeAddr(t) // nothing listens there
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantMsg  []string
	}{
		{"help", []string{"-h"}, 0, nil},
		{"unknown command", []string{"frobnicate"}, 2, []string{"unknown command"}},
		{"unknown store", []string{"run", "--store", "nope"}, 2, []string{"--store", "unknown store"}},
		{"bad flag value", []string{"run", "--commit-interval", "soon"}, 2, []string{"commit-interval"}},
		{"registry unreachable", []string{"run", "--schema-registry", "http://" + dead, "--data-dir", t.TempDir()}, 2,
			[]string{"schema registry", dead, "--schema-registry"}},
		{"bench: both distributions", []string{"bench", "--zipf", "--uniform"}, 2, []string{"--zipf and --uniform"}},
		{"bench: restart alone", []string{"bench", "--phases", "restart"}, 2, []string{"--phases", "need fill or run"}},
		{"bench: unknown phase", []string{"bench", "--phases", "fill,warmup"}, 2, []string{"unknown phase", "warmup"}},
		{"brokers unreachable", []string{"run", "--brokers", dead, "--schema-registry", reg.URL(), "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0"}, 2,
			[]string{"brokers", dead, "--brokers"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			code := run(ctx, tt.args, strings.NewReader(""), &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d; stderr: %s", code, tt.wantCode, stderr.String())
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not mention %q", stderr.String(), w)
				}
			}
		})
	}
}
