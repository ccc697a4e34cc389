package storebench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/boltstore"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/redisstore"
)

// benchDocs is the number of movies in the benchmark stores;
// KEEPSTATE_BENCH_DOCS overrides it (for example 100000 for a quick run).
func benchDocs() int {
	if n, err := strconv.Atoi(os.Getenv("KEEPSTATE_BENCH_DOCS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// redisPrefix is the key prefix of the benchmark store in its redis-server.
const redisPrefix = "storebench:"

// fix holds the three stores shared by every sub-benchmark of the process,
// built once by the first call of fixture; TestMain tears it down.
var fix struct {
	once sync.Once
	err  error
	n    int

	tmp       string  // removed by TestMain
	cloverDir string  // Clover on Pebble (docstore)
	clover    *writer //
	bboltDir  string  // Clover on bbolt (internal/boltstore, the old docstore)
	bbolt     *writer

	redisMissing bool
	redis        *testkit.Redis
	redisStore   *redisstore.Store // stream on (default MAXLEN)
	redisW       *writer

	mu   sync.Mutex
	runs map[string]uint64 // per sub-benchmark name: how often it ran

	// notes describe the build; the first sub-benchmark logs them (the
	// output of a benchmark that only has sub-benchmarks is not shown).
	notes     []string
	notesOnce sync.Once
}

// logNotes logs the build notes once per process.
func logNotes(b *testing.B) {
	fix.notesOnce.Do(func() {
		for _, n := range fix.notes {
			b.Log(n)
		}
	})
}

func note(format string, args ...any) { fix.notes = append(fix.notes, fmt.Sprintf(format, args...)) }

// fixture builds both stores of benchDocs movies on first use.
func fixture(b *testing.B) {
	b.Helper()
	fix.once.Do(func() { fix.err = build() })
	if fix.err != nil {
		b.Fatalf("benchmark stores: %v", fix.err)
	}
}

func build() error {
	fix.n = benchDocs()
	fix.runs = map[string]uint64{}
	tmp, err := os.MkdirTemp("", "storebench-")
	if err != nil {
		return err
	}
	fix.tmp, fix.cloverDir, fix.bboltDir = tmp, filepath.Join(tmp, "clover"), filepath.Join(tmp, "bbolt")
	for _, st := range []struct {
		name  string
		dir   string
		w     **writer
		build func(string, int, *writer) error
	}{
		{"bbolt", fix.bboltDir, &fix.bbolt, buildBbolt},
		{"clover", fix.cloverDir, &fix.clover, buildClover},
	} {
		*st.w = newWriter(fix.n)
		start := time.Now()
		if err := st.build(st.dir, fix.n, *st.w); err != nil {
			return err
		}
		took := time.Since(start)
		note("%s: full restore of %d movies in %v: %.0f docs/s (replay batches of %d, fsync on, partitions one after another); disk %s",
			st.name, fix.n, took.Round(time.Millisecond), float64(fix.n)/took.Seconds(), replayBatch, diskUsage(st.dir))
	}

	r, err := testkit.LaunchRedis()
	if errors.Is(err, testkit.ErrRedisMissing) {
		fix.redisMissing = true
		note("redis: %v; the redis sub-benchmarks will skip", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("launch redis-server: %w", err)
	}
	fix.redis = r
	ctx := context.Background()
	fix.redisW = newWriter(fix.n)
	start := time.Now()
	if err := buildRedis(ctx, r.URL(), redisPrefix, fix.n, fix.redisW); err != nil {
		return err
	}
	took := time.Since(start)
	note("redis: full restore of %d movies in %v: %.0f docs/s (replay batches of %d, stream off, partitions one after another); %s",
		fix.n, took.Round(time.Millisecond), float64(fix.n)/took.Seconds(), replayBatch, redisMemory(r))
	fix.redisStore, err = redisstore.Open(ctx, r.URL(), redisstore.WithPrefix(redisPrefix))
	return err
}

// diskUsage returns the bytes the files under dir occupy on disk (du).
func diskUsage(dir string) string {
	var blocks int64
	_ = filepath.WalkDir(dir, func(_ string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		if fi, err := e.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				blocks += st.Blocks
			}
		}
		return nil
	})
	return fmt.Sprintf("%.0f MiB", float64(blocks*512)/(1<<20))
}

// redisMemory returns used_memory_human from INFO memory.
func redisMemory(r *testkit.Redis) string {
	replies, err := testkit.RedisDo(r.Addr(), 5*time.Second, []string{"INFO", "memory"})
	if err != nil {
		return "used_memory unknown: " + err.Error()
	}
	for line := range strings.SplitSeq(replies[0], "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory_human:"); ok {
			return "used_memory " + v
		}
	}
	return "used_memory unknown"
}

// redisUsec returns the microseconds the shared redis-server has spent
// executing the named commands so far (INFO commandstats); ok is false when
// it cannot tell. Commands run by scripts are counted under their own names
// too, so callers name only the commands they send.
func redisUsec(cmds ...string) (usec int64, ok bool) {
	replies, err := testkit.RedisDo(fix.redis.Addr(), 5*time.Second, []string{"INFO", "commandstats"})
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(replies[0], "\n") {
		name, stats, found := strings.Cut(strings.TrimSpace(line), ":")
		if !found || !slices.Contains(cmds, strings.TrimPrefix(name, "cmdstat_")) {
			continue
		}
		for field := range strings.SplitSeq(stats, ",") {
			if v, found := strings.CutPrefix(field, "usec="); found {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, false
				}
				usec += n
			}
		}
	}
	return usec, true
}

// serverTime is the time redis-server spends in some commands during a
// sub-benchmark; nil (for Clover, which has no server) reports nothing.
type serverTime struct {
	cmds  []string
	start int64
}

// startServerTime starts measuring cmds on t's server, if it has one.
func startServerTime(t target, cmds ...string) *serverTime {
	if !t.server {
		return nil
	}
	u, ok := redisUsec(cmds...)
	if !ok {
		return nil
	}
	return &serverTime{cmds: cmds, start: u}
}

// report adds the server time per unit of work (per ops) as unit.
func (st *serverTime) report(b *testing.B, per int, unit string) {
	if st == nil || per == 0 {
		return
	}
	if u, ok := redisUsec(st.cmds...); ok {
		b.ReportMetric(float64(u-st.start)/float64(per), unit)
	}
}

// teardown stops the shared redis-server and removes the Clover store.
func teardown() {
	if fix.redisStore != nil {
		_ = fix.redisStore.Close()
	}
	if fix.redis != nil {
		_ = fix.redis.Close()
	}
	if fix.tmp != "" {
		_ = os.RemoveAll(fix.tmp)
	}
}

// target is one store under test: how to open it for a sub-benchmark and
// the writer state its batches continue from.
type target struct {
	name string
	w    *writer
	open func(b *testing.B) engine.Store
	// server is true for the Redis store: its time in redis-server is
	// reported too.
	server bool
	// fresh opens a new Store on the same data (embedded stores only).
	fresh func() (engine.Store, error)
}

// openClover opens the shared Clover store for one sub-benchmark (the
// data directory admits one Store at a time) and closes it when it ends.
// It waits, outside the timer, until the store has filled its write cache
// (docstore.Store.Warmed): the state of a store that has been running for
// more than a second or two.
func openClover(b *testing.B) engine.Store {
	return openDir(b, "clover", func() (engine.Store, error) {
		s, err := docstore.Open(fix.cloverDir)
		if err == nil {
			<-s.Warmed()
		}
		return s, err
	})
}

// openBbolt does the same for the old bbolt store.
func openBbolt(b *testing.B) engine.Store {
	return openDir(b, "bbolt", func() (engine.Store, error) { return boltstore.Open(fix.bboltDir) })
}

func openDir(b *testing.B, name string, open func() (engine.Store, error)) engine.Store {
	{
		s, err := open()
		if err != nil {
			b.Fatalf("open %s store: %v", name, err)
		}
		b.Cleanup(func() {
			if err := s.Close(); err != nil {
				b.Errorf("close %s store: %v", name, err)
			}
		})
		return s
	}
}

// openRedis returns the shared Redis store, or skips (fails under
// KEEPSTATE_REQUIRE_SERVICES=1) without redis-server.
func openRedis(b *testing.B) engine.Store {
	if fix.redisMissing {
		testkit.Missing(b, "redis-server", testkit.RedisInstall)
	}
	return fix.redisStore
}

// rng returns the random source of one run of the calling sub-benchmark:
// seeded by its name (clover and redis draw different ids, so neither
// runs on pages the other just warmed) and its run count (a -count
// repetition draws new ids).
func rng(b *testing.B) *rand.Rand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(b.Name()))
	fix.mu.Lock()
	run := fix.runs[b.Name()]
	fix.runs[b.Name()]++
	fix.mu.Unlock()
	return rand.New(rand.NewPCG(h.Sum64(), run))
}
