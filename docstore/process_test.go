package docstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// Child processes: the test binary re-executed with -test.run=TestHelperProcess
// and these variables set.
const (
	helperModeEnv = "KEEPSTATE_DOCSTORE_HELPER"
	helperDirEnv  = "KEEPSTATE_DOCSTORE_HELPER_DIR"
)

// crashMovies is how many movies every crash-test batch rewrites.
const crashMovies = 300

// crashBatch is batch k of the crash test: every movie gets count k,
// version k and an average that depends on k, so index entries move.
func crashBatch(k int64) []engine.MovieStats {
	docs := make([]engine.MovieStats, crashMovies)
	for i := range docs {
		id := int64(i + 1)
		avg := float64((id*7+k*13)%41) / 4 // 0..10, ties included
		docs[i] = engine.MovieStats{MovieID: id, Partition: int32(id % 3), Count: k, Sum: avg * float64(k),
			Version: k, Sources: map[int32]int64{0: k}}
	}
	return docs
}

// TestHelperProcess is not a test: it is the body of child processes.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperModeEnv)
	if mode == "" {
		t.Skip("helper process body; run by other tests")
	}
	dir := os.Getenv(helperDirEnv)
	ctx := context.Background()
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		os.Exit(3)
	}
	var opts []Option
	if mode == "restore" {
		opts = append(opts, withIngestChunk(250)) // background ingestions every few batches
	}
	s, err := Open(dir, opts...)
	if err != nil {
		fail("open: %v", err)
	}
	switch mode {
	case "open":
		fmt.Println("opened")
		s.Close()
		os.Exit(0)
	case "hold":
		fmt.Println("holding")
		_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes stdin or kills us
		s.Close()
		os.Exit(0)
	case "restore":
		runRestoreHelper(ctx, s, fail)
	case "write":
		epoch, err := s.Claim(ctx, 0)
		if err != nil {
			fail("claim: %v", err)
		}
		next, _, err := s.Checkpoint(ctx, 0)
		if err != nil {
			fail("checkpoint: %v", err)
		}
		for k := next + 1; ; k++ {
			b := engine.Batch{Partition: 0, Epoch: epoch, Docs: crashBatch(k), Checkpoint: k}
			fmt.Printf("begin %d\n", k)
			if err := s.Apply(ctx, b); err != nil {
				fail("apply %d: %v", k, err)
			}
			fmt.Printf("applied %d\n", k)
		}
	}
	fail("unknown helper mode %q", mode)
}

// helper starts the test binary as a child in mode on dir.
func helper(t *testing.T, mode, dir string) (*exec.Cmd, *bufio.Scanner, io.WriteCloser, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperModeEnv+"="+mode, helperDirEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, bufio.NewScanner(stdout), stdin, &stderr
}

// TestCrashDuringBatches kills a writing child with SIGKILL at random
// moments and checks after each kill that every batch is all there with
// its checkpoint or not there at all, and that the index agrees with a scan
// of the documents.
func TestCrashDuringBatches(t *testing.T) {
	const kills = 12
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var lastAck int64
	inBatch := 0 // kills that landed between "begin" and "applied"
	for i := range kills {
		cmd, out, _, stderr := helper(t, "write", dir)
		lines := make(chan int64, 1024) // k for "applied k", -k for "begin k"
		go func() {
			defer close(lines)
			for out.Scan() {
				verb, num, _ := strings.Cut(out.Text(), " ")
				k, err := strconv.ParseInt(num, 10, 64)
				switch {
				case err != nil:
				case verb == "applied":
					lines <- k
				case verb == "begin":
					lines <- -k
				}
			}
		}()
		// Wait for a few acknowledged batches, then kill at a random moment.
		want := 1 + r.IntN(3)
		deadline := time.After(30 * time.Second)
		for seen := 0; seen < want; {
			select {
			case k, ok := <-lines:
				if !ok {
					t.Fatalf("kill %d: child exited early: %s", i, stderr.String())
				}
				if k > 0 {
					lastAck, seen = k, seen+1
				}
			case <-deadline:
				t.Fatalf("kill %d: child acknowledged no batch within 30s: %s", i, stderr.String())
			}
		}
		time.Sleep(time.Duration(r.IntN(40_000)) * time.Microsecond)
		if err := syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill: %v", err)
		}
		_ = cmd.Wait()
		last := lastAck
		for k := range lines {
			if last = k; k > 0 {
				lastAck = k
			}
		}
		if last < 0 {
			inBatch++
		}

		s, err := Open(dir, WithLockTimeout(5*time.Second))
		if err != nil {
			t.Fatalf("reopen after kill %d: %v", i, err)
		}
		next := checkCrashState(t, s)
		if next < lastAck || next > lastAck+1 {
			t.Fatalf("kill %d: checkpoint %d; the child acknowledged batch %d (want %d or %d)", i, next, lastAck, lastAck, lastAck+1)
		}
		t.Logf("kill %d: during a batch %v, acknowledged %d, found batch %d complete", i, last < 0, lastAck, next)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if inBatch < kills/2 {
		t.Fatalf("only %d of %d kills landed inside a batch; the test did not exercise torn writes", inBatch, kills)
	}
}

// checkCrashState verifies the invariants of the crash test and returns the
// checkpoint.
func checkCrashState(t *testing.T, s *Store) int64 {
	t.Helper()
	ctx := context.Background()
	next, ok, err := s.Checkpoint(ctx, 0)
	if err != nil || !ok {
		t.Fatalf("checkpoint = %d, %v, %v; want one", next, ok, err)
	}
	ids := make([]int64, crashMovies)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	docs, err := s.Load(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	want := crashBatch(next)
	if len(docs) != crashMovies {
		t.Fatalf("checkpoint %d but %d of %d movies stored", next, len(docs), crashMovies)
	}
	for _, w := range want {
		g := docs[w.MovieID]
		if g.Count != w.Count || g.Version != w.Version || g.Sum != w.Sum || g.Partition != w.Partition {
			t.Fatalf("checkpoint %d but movie %d is %+v; want %+v (partial batch)", next, w.MovieID, g, w)
		}
	}
	if err := checkIndexAgrees(s); err != nil {
		t.Fatalf("after checkpoint %d: %v", next, err)
	}
	return next
}

// checkIndexAgrees compares the rank index with a scan of the documents:
// one index entry per document and none left over, the collection size
// Clover records, and range pages (served by the index) in exactly the
// order the documents' own averages give.
func checkIndexAgrees(s *Store) error {
	ctx := context.Background()
	scan, err := scanTop(s, math.Inf(-1), -1)
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	raw, err := s.rawCounts()
	if err != nil {
		return err
	}
	if raw.docs != len(scan) || raw.rankEntries != len(scan) || raw.size != len(scan) || raw.members != len(scan) {
		return fmt.Errorf("%d documents scanned, %d stored, %d rank entries, %d members, collection size %d; want all equal",
			len(scan), raw.docs, raw.rankEntries, raw.members, raw.size)
	}
	for id := range raw.rankIDs {
		if !raw.docIDs[id] {
			return fmt.Errorf("rank entry for %s has no document", id)
		}
	}
	var paged []engine.MovieStats
	q := engine.RangeQuery{MinAvg: math.Inf(-1), MaxAvg: math.Inf(1), Limit: 37}
	for {
		page, err := s.Range(ctx, q)
		if err != nil {
			return err
		}
		paged = append(paged, page.Movies...)
		if page.Next == nil {
			break
		}
		q.After = page.Next
	}
	if len(paged) != len(scan) {
		return fmt.Errorf("range pages returned %d movies; scan %d", len(paged), len(scan))
	}
	for i := range scan { // scanTop sorts by avg desc, movieId asc from the documents themselves
		if paged[i].MovieID != scan[i].MovieID || paged[i].Count != scan[i].Count {
			return fmt.Errorf("position %d: index says movie %d, scan says movie %d", i, paged[i].MovieID, scan[i].MovieID)
		}
	}
	return nil
}

// TestSecondProcessFailsFast runs a child that holds the data dir and a
// second child that opens it with the default options: the second must
// exit within 5 s with an error naming the directory and the holder.
func TestSecondProcessFailsFast(t *testing.T) {
	dir := t.TempDir()
	holder, out, stdin, stderr := helper(t, "hold", dir)
	if !out.Scan() || out.Text() != "holding" {
		t.Fatalf("holder did not start: %q %s", out.Text(), stderr.String())
	}

	start := time.Now()
	second := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	second.Env = append(os.Environ(), helperModeEnv+"=open", helperDirEnv+"="+dir)
	output, err := second.CombinedOutput()
	took := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("second process: err %v, output %q; want exit code 3 with an error", err, output)
	}
	if took >= 5*time.Second {
		t.Fatalf("second process took %v to fail; want < 5s", took)
	}
	msg := string(output)
	for _, want := range []string{dir, fmt.Sprintf("pid=%d", holder.Process.Pid), "in use by another process"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("second process said %q; want it to mention %q", msg, want)
		}
	}
	t.Logf("second process failed after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(msg))

	// Once the holder is gone, the directory opens again.
	stdin.Close()
	if err := holder.Wait(); err != nil {
		t.Fatalf("holder exit: %v %s", err, stderr.String())
	}
	third := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	third.Env = append(os.Environ(), helperModeEnv+"=open", helperDirEnv+"="+dir)
	if output, err := third.CombinedOutput(); err != nil {
		t.Fatalf("open after the holder exited: %v %s", err, output)
	}
}
