package testkit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// knownRaces lists data races inside dependencies that the project cannot
// fix, each as frames that must all appear in a report for it to be
// excused. Every excused report is still logged.
//
// sarama v1.61.1: when a transactional producer's request fails (a zombie's
// produce after it was fenced), the broker producer goroutine reads the
// transaction manager's lastError in publishTxnPartitions without the
// status lock while a retry goroutine writes it in transitionTo under that
// lock. The race is on an error value inside sarama; keepstate only sees
// the resulting error.
var knownRaces = [][]string{
	{"sarama.(*transactionManager).transitionTo", "sarama.(*transactionManager).publishTxnPartitions"},
}

// childRaceEnv makes a race-enabled child write its race reports to files
// in dir instead of exiting with code 66, so that checkChildRaces can tell
// the project's races from known ones in dependencies.
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
			if !strings.Contains(report, "WARNING: DATA RACE") {
				continue
			}
			if known(report) {
				t.Logf("testkit: %s: known data race inside a dependency (see testkit.knownRaces), not keepstate's:\n%.600s", name, report)
				continue
			}
			t.Errorf("testkit: %s: DATA RACE:\n%s", name, report)
		}
	}
}

// known reports whether report holds every frame of a known race.
func known(report string) bool {
	for _, frames := range knownRaces {
		if !slices.ContainsFunc(frames, func(f string) bool { return !strings.Contains(report, f) }) {
			return true
		}
	}
	return false
}
