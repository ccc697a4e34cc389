// Package machine tells the comparison commands (compare/throughput,
// compare/groupchange) about the machine they run on: its load, the
// versions of the programs they start. Every function
// is safe for concurrent use and answers "?" rather than failing.
package machine

import (
	"os"
	"os/exec"
	"strings"
)

// Command runs name with args and returns its output, trimmed, or "?"
// when it fails.
func Command(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// JavaVersion returns the first line of `java -version`.
func JavaVersion(java string) string {
	line, _, _ := strings.Cut(Command(java, "-version"), "\n")
	return line
}

// LoadAvg returns the 1, 5 and 15 minute load averages.
func LoadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
