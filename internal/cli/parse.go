package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/keepstate/keepstate/app"
)

// ErrUsage marks a command-line error that the flag package (or Parse)
// already printed with the usage; the program exits 2 without repeating
// it.
var ErrUsage = errors.New("usage")

// Parse parses args into fs, refuses positional arguments, then fills the
// flags left unset from their KEEPSTATE_* environment variables (see
// ApplyEnv). flag.ErrHelp is returned as is; other errors wrap ErrUsage.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %v\n", fs.Args())
		return ErrUsage
	}
	if err := ApplyEnv(fs); err != nil {
		fmt.Fprintln(fs.Output(), err)
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return nil
}

// ExitCode reports err of command cmd of program prog on stderr (unless
// the flag package printed it already) and returns the exit code: 0 for
// success or -help, 2 for usage, configuration and unavailable-service
// errors (and extra, if set), 1 for anything else.
func ExitCode(stderr io.Writer, prog, cmd string, err error, extra ...error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	}
	fmt.Fprintf(stderr, "%s %s: %v\n", prog, cmd, err)
	for _, e := range append([]error{app.ErrConfig, app.ErrUnavailable}, extra...) {
		if errors.Is(err, e) {
			return 2
		}
	}
	return 1
}
