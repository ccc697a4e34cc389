package testkit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// knownRaces lists data races inside dependencies that the project cannot
// fix, each as frames that must all appear in a report to excuse it (it is
// still logged).
//
// sarama v1.61.1: when a fenced zombie's transactional produce fails, the
// broker producer goroutine reads the transaction manager's lastError in
// publishTxnPartitions without the status lock that transitionTo holds
// while writing it; keepstate only sees the resulting error.
var knownRaces = [][]string{
	{"sarama.(*transactionManager).transitionTo", "sarama.(*transactionManager).publishTxnPartitions"},
}

// childRaceEnv makes a race-enabled child write its race reports to files
// in dir instead of exiting with code 66, for checkChildRaces to sort.
func childRaceEnv(dir string) []string {
	if !RaceEnabled {
		return nil
	}
	return []string{"GORACE=exitcode=0 log_path=" + filepath.Join(dir, "race")}
}

// checkChildRaces fails t for every race report of a child in dir that is
// not a known dependency race.
func checkChildRaces(t testing.TB, name, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "race.*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, report := range strings.Split(string(b), "==================") {
			switch {
			case !strings.Contains(report, "WARNING: DATA RACE"):
			case known(report):
				t.Logf("testkit: %s: known data race inside a dependency (see testkit.knownRaces), not keepstate's:\n%.600s", name, report)
			default:
				t.Errorf("testkit: %s: DATA RACE:\n%s", name, report)
			}
		}
	}
}

// known reports whether report holds every frame of a known race.
func known(report string) bool {
	return slices.ContainsFunc(knownRaces, func(frames []string) bool {
		return !slices.ContainsFunc(frames, func(f string) bool { return !strings.Contains(report, f) })
	})
}
