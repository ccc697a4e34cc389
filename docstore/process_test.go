package docstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// Child processes: the test binary re-executed with -test.run=TestHelperProcess
// and these variables set.
const (
	helperModeEnv = "KEEPSTATE_DOCSTORE_HELPER"
	helperDirEnv  = "KEEPSTATE_DOCSTORE_HELPER_DIR"
)

// crashMovies is how many movies every crash-test batch rewrites.
const crashMovies = 300

// crashBatch is batch k of the crash test, into a table of the movie
// job's spec (movies.Spec): every movie of partition 0 gets count k,
// version k and an average that depends on k, so index entries move.
func crashBatch(k int64) []engine.Doc {
	docs := make([]engine.Doc, crashMovies)
	for i := range docs {
		id := int64(i + 1)
		avg := float64((id*7+k*13)%41) / 4 // 0..10, ties included
		docs[i] = movieTableDoc(id, 0, k, k, avg*float64(k))
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
	tb, err := s.OpenTable(ctx, movies.Spec)
	if err != nil {
		fail("open table: %v", err)
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
		runRestoreHelper(ctx, tb, fail)
	case "write":
		epoch, err := tb.Claim(ctx, 0)
		if err != nil {
			fail("claim: %v", err)
		}
		next, _, err := tb.Checkpoint(ctx, 0)
		if err != nil {
			fail("checkpoint: %v", err)
		}
		for k := next + 1; ; k++ {
			b := engine.DocBatch{Partition: 0, Epoch: epoch, Docs: crashBatch(k), Checkpoint: k}
			fmt.Printf("begin %d\n", k)
			if err := tb.Apply(ctx, b); err != nil {
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
// its checkpoint or not there at all, index entries and members keys
// included.
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
// checkpoint: the table holds exactly the batch of its checkpoint, and
// its keys agree (wantTableDocs).
func checkCrashState(t *testing.T, s *Store) int64 {
	t.Helper()
	tb := mustTable(t, s, movies.Spec)
	next, ok, err := tb.Checkpoint(context.Background(), 0)
	if err != nil || !ok {
		t.Fatalf("checkpoint = %d, %v, %v; want one", next, ok, err)
	}
	wantTableDocs(t, s, tb, crashBatch(next))
	return next
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
