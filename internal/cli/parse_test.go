package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"testing"

	"github.com/keepstate/keepstate/app"
)

func TestExitCode(t *testing.T) {
	errExtra := errors.New("extra")
	tests := []struct {
		name      string
		err       error
		want      int
		wantPrint bool
	}{
		{"success", nil, 0, false},
		{"help", flag.ErrHelp, 0, false},
		{"usage, already printed", fmt.Errorf("%w: bad flag", ErrUsage), 2, false},
		{"config", fmt.Errorf("%w: bad store", app.ErrConfig), 2, true},
		{"service down", fmt.Errorf("%w: kafka", app.ErrUnavailable), 2, true},
		{"extra", fmt.Errorf("x: %w", errExtra), 2, true},
		{"anything else", errors.New("boom"), 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if got := ExitCode(&out, "prog", "run", tt.err, errExtra); got != tt.want {
				t.Errorf("exit code: got %d, want %d", got, tt.want)
			}
			if printed := out.Len() > 0; printed != tt.wantPrint {
				t.Errorf("printed %q: got printed=%v, want %v", out.String(), printed, tt.wantPrint)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr error
	}{
		{"flags", []string{"--store", "redis"}, nil},
		{"positional", []string{"extra"}, ErrUsage},
		{"unknown flag", []string{"--nope"}, ErrUsage},
		{"help", []string{"-h"}, flag.ErrHelp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(&bytes.Buffer{})
			c := app.Default()
			CommonFlags(fs, &c)
			if err := Parse(fs, tt.args); !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("Parse(%v): got %v, want %v", tt.args, err, tt.wantErr)
			}
		})
	}
}
