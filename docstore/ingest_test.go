package docstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/movies"
)

// restoreParts is how many partitions the bulk-load crash test restores,
// round robin, as a restore of several partitions interleaves them.
const restoreParts = 3

// restoreBatch is batch k of partition p of the bulk-load crash test, in
// a table of the movie job's spec: 100 movies of a pool of 1000 per
// partition, each at version k, so that later batches rewrite movies
// written by earlier ones (and their index entries move) and add new ones.
func restoreBatch(p int32, k int64) []engine.Doc {
	docs := make([]engine.Doc, 100)
	for j := range docs {
		id := int64(p)*100_000 + (k*37+int64(j)*11)%1000
		docs[j] = benchMovie(id, p, k)
	}
	return docs
}

// restoreState is what partition p holds after its batches 1..c, by key.
func restoreState(p int32, c int64) map[string]engine.Doc {
	out := map[string]engine.Doc{}
	for k := int64(1); k <= c; k++ {
		for _, d := range restoreBatch(p, k) {
			out[string(d.Key)] = d
		}
	}
	return out
}

// runRestoreHelper is the child of TestCrashDuringBulkLoad: it claims the
// partitions of an empty table and replays batches into them round robin
// for ever. Every 4 rounds it reads a checkpoint, which writes the
// buffered load out, and reports the round as durable.
func runRestoreHelper(ctx context.Context, tb engine.Table, fail func(string, ...any)) {
	epochs := make([]int64, restoreParts)
	for p := range int32(restoreParts) {
		e, err := tb.Claim(ctx, p)
		if err != nil {
			fail("claim: %v", err)
		}
		epochs[p] = e
	}
	for k := int64(1); ; k++ {
		fmt.Printf("begin %d\n", k)
		for p := range int32(restoreParts) {
			b := engine.DocBatch{Partition: p, Epoch: epochs[p], Docs: restoreBatch(p, k), Checkpoint: k, Replay: true}
			if err := tb.Apply(ctx, b); err != nil {
				fail("apply %d: %v", k, err)
			}
		}
		if k%4 == 0 {
			fmt.Printf("writing %d\n", k)
			if _, _, err := tb.Checkpoint(ctx, 0); err != nil {
				fail("checkpoint: %v", err)
			}
			fmt.Printf("durable %d\n", k)
		}
	}
}

// TestCrashDuringBulkLoad kills a child restoring three partitions into an
// empty table (the buffered, ingested bulk-load path) with SIGKILL at
// random moments, each time in a new directory. After each kill every
// partition must hold exactly its batches up to its checkpoint (no
// checkpoint: no document), at least the rounds reported durable and at
// most the rounds begun, with index entries and members keys agreeing
// with the documents.
func TestCrashDuringBulkLoad(t *testing.T) {
	const kills = 10
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	partial := 0 // kills after which a partition held fewer rounds than begun
	torn := 0    // kills that landed while a buffer was being written out
	for i := range kills {
		dir := t.TempDir()
		cmd, out, _, stderr := helper(t, "restore", dir)
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			for out.Scan() {
				lines <- out.Text()
			}
		}()
		var durable, begun int64
		var last string
		note := func(line string) {
			verb, num, _ := strings.Cut(line, " ")
			k, _ := strconv.ParseInt(num, 10, 64)
			last = verb
			switch verb {
			case "durable":
				durable = k
			case "begin":
				begun = k
			}
		}
		want := int64(4 * (1 + r.IntN(3)))
		deadline := time.After(30 * time.Second)
		until := func(done func() bool, what string) {
			for !done() {
				select {
				case line, ok := <-lines:
					if !ok {
						t.Fatalf("kill %d: child exited early: %s", i, stderr.String())
					}
					note(line)
				case <-deadline:
					t.Fatalf("kill %d: %s: not within 30s: %s", i, what, stderr.String())
				}
			}
		}
		until(func() bool { return durable >= want }, fmt.Sprintf("round %d durable", want))
		// Kill soon after the child starts writing a buffer out, so that
		// many kills land inside the ingestion.
		until(func() bool { return last == "writing" }, "a buffer written out")
		time.Sleep(time.Duration(r.IntN(15_000)) * time.Microsecond)
		if err := syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill: %v", err)
		}
		_ = cmd.Wait()
		for line := range lines {
			note(line)
		}
		if last == "writing" {
			torn++
		}

		s, err := Open(dir, WithLockTimeout(5*time.Second))
		if err != nil {
			t.Fatalf("reopen after kill %d: %v", i, err)
		}
		tb := mustTable(t, s, movies.Spec)
		var found []int64
		var all []engine.Doc
		for p := range int32(restoreParts) {
			c := checkRestoredPartition(t, tb, p, durable, begun)
			found = append(found, c)
			if c < begun {
				partial++
			}
			for _, d := range restoreState(p, c) {
				all = append(all, d)
			}
		}
		wantTableDocs(t, s, tb, all)
		t.Logf("kill %d: during a write-out %v; rounds durable %d, begun %d; partitions hold rounds %v", i, last == "writing", durable, begun, found)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d of %d kills landed while a buffer was being written out", torn, kills)
	if torn == 0 {
		t.Fatalf("no kill landed while a buffer was being written out; the test did not exercise torn ingests")
	}
	if partial == 0 {
		t.Fatalf("no kill left a partition short of its last begun round; the test did not catch a buffered load")
	}
}

// checkRestoredPartition checks partition p after a kill and returns its
// checkpoint (0: none).
func checkRestoredPartition(t *testing.T, tb engine.Table, p int32, durable, begun int64) int64 {
	t.Helper()
	ctx := context.Background()
	c, ok, err := tb.Checkpoint(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		c = 0
	}
	if c < durable || c > begun {
		t.Fatalf("partition %d: checkpoint %d (present %v); want between the durable round %d and the begun round %d", p, c, ok, durable, begun)
	}
	want := restoreState(p, c)
	pool := make([][]byte, 1000)
	for j := range pool {
		pool[j] = movies.Key(int64(p)*100_000 + int64(j))
	}
	got, err := tb.Load(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("partition %d at checkpoint %d holds %d movies; want %d", p, c, len(got), len(want))
	}
	for k, w := range want {
		if g := got[k]; !sameTableDoc(g, w) {
			t.Fatalf("partition %d at checkpoint %d: key %x is %+v; want %+v", p, c, k, g, w)
		}
	}
	return c
}

// TestBulkLoadWrittenOutWhenIdle checks that a buffered bulk load is
// written out by itself once no bulk batch follows (the engine does not
// say when a restore ends), without any other call on the table: one
// ingestion (the reading path ingests nothing) and nothing buffered.
func TestBulkLoadWrittenOutWhenIdle(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	tb := mustTable(t, s, movies.Spec)
	epoch, err := tb.Claim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Apply(ctx, engine.DocBatch{Partition: 1, Epoch: epoch, Docs: restoreBatch(1, 1), Checkpoint: 1, Replay: true}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "buffered load written out", func() error {
		if n, b := s.counts.ingests.Load(), tb.cache.buffered.Load(); n != 1 || b {
			return fmt.Errorf("%d ingests, still buffered %v", n, b)
		}
		return nil
	})
}

// TestBulkLoadNeedsAnEmptyTable checks that a replay into an empty
// partition of a table that already holds documents takes the reading
// path (no bulk load: it would take the stored documents for new ones),
// here moving a stored document into the partition.
func TestBulkLoadNeedsAnEmptyTable(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, WithFsync(false))
	defer s.Close()
	tb := mustTable(t, s, movies.Spec)
	<-tb.cache.warmed // of the empty table: it adds nothing later
	stored := restoreBatch(0, 1)
	applyDocs(t, tb, 0, 1, stored...)
	s.wmu.Lock()
	s.tcache.clear(tb.cache) // Apply reads what the cache does not know
	s.wmu.Unlock()
	reads := s.counts.writeReads.Load()
	epoch, err := tb.Claim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	moved := stored[0]
	moved.Partition, moved.Version, moved.Sources = 1, 2, map[int32]int64{1: 2}
	docs := append(restoreBatch(1, 1), moved)
	if err := tb.Apply(ctx, engine.DocBatch{Partition: 1, Epoch: epoch, Docs: docs, Checkpoint: 1, Replay: true}); err != nil {
		t.Fatal(err)
	}
	s.wmu.Lock()
	on, buffered := tb.cache.bulk.on, tb.cache.buffered.Load()
	s.wmu.Unlock()
	if on || buffered {
		t.Fatalf("replay into an empty partition of a table holding documents: bulk load %v, buffered %v; want neither", on, buffered)
	}
	if got := s.counts.writeReads.Load() - reads; got != 1 {
		t.Errorf("the replay read %d stored documents; want 1 (the moved one)", got)
	}
	want := append(docs, stored[1:]...)
	wantTableDocs(t, s, tb, want)
}
