package app

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"sync/atomic"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/malloc"
)

// minGoMemoryMiB is the least memory limit left for Go's heap that
// applyMemoryLimit accepts: below it the collector would run all the time.
const minGoMemoryMiB = 64

// baseMiB is what the process holds besides Go's heap and the store's
// caches: the binary's resident code, thread stacks and the C allocator's
// own overhead (measured at 45–50 MiB).
const baseMiB = 48

// headroomPercent is the share of the limit planMemory keeps free: Go's
// limit is soft and the C allocator's holdings move, so a 1M-movie run
// planned to the last MiB peaked 1–3 MiB over a 300 MiB limit (three runs;
// docs/benchmarks.md).
const headroomPercent = 3

// DefaultMemoryTargetMiB is the memory target of a process given no
// --memory-limit-mib outside a container (issue 12 asks for 300 MiB at 1M
// movies): the process plans its caches and collector for it, and the
// memory governor raises it when the live heap needs more (elastic), so
// it is never a cap.
const DefaultMemoryTargetMiB = 300

// memoryPlan is the soft memory limit a Config asks for.
type memoryPlan struct {
	totalMiB int64  // the process's limit, 0 for none
	goMiB    int64  // of it, Go's soft limit (GOMEMLIMIT)
	offHeap  int64  // MiB held outside Go's heap: baseMiB and the store's caches
	headroom int64  // MiB kept free (headroomPercent of totalMiB)
	source   string // flag, container, default or none
}

// elastic reports whether p is the default target, which the governor
// raises when the live heap needs more (memoryGovernor.raise), where a
// limit the operator or the container set stays where it is.
func (p memoryPlan) elastic() bool { return p.source == "default" }

// setTotal makes totalMiB the limit: the headroom comes off it, and Go
// gets what the headroom and offHeap leave.
func (p *memoryPlan) setTotal(totalMiB int64) {
	p.totalMiB = totalMiB
	p.headroom = totalMiB * headroomPercent / 100
	p.goMiB = totalMiB - p.offHeap - p.headroom
}

// planMemory works out the limit: --memory-limit-mib when positive, else
// (0) 90% of containerMiB when there is a container limit, else (0) the
// elastic DefaultMemoryTargetMiB. baseMiB and the headroom come off it,
// and so do the clover store's block cache and its memtables
// (docstore.MaxMemtables of them: counting two, a 1M-movie run under 300
// MiB peaked at 323–334 MiB) when they live outside Go's heap (cgo
// builds). It returns ErrConfig when a limit that was asked for leaves
// Go's heap less than minGoMemoryMiB; the default target grows instead
// (a large --store-cache-mib takes it along rather than refusing to
// start).
func planMemory(c Config, containerMiB int64, offHeapAllocator bool) (memoryPlan, error) {
	p := memoryPlan{source: "none"}
	switch {
	case c.MemoryLimitMiB > 0:
		p.totalMiB, p.source = c.MemoryLimitMiB, "flag"
	case c.MemoryLimitMiB == 0 && containerMiB > 0:
		p.totalMiB, p.source = containerMiB*9/10, "container"
	case c.MemoryLimitMiB == 0:
		p.totalMiB, p.source = DefaultMemoryTargetMiB, "default"
	default:
		return p, nil
	}
	p.offHeap = baseMiB
	if c.Store == StoreClover && offHeapAllocator {
		p.offHeap += c.StoreCacheMiB + docstore.MaxMemtables*(docstore.DefaultMemtableSize>>20)
	}
	least := (p.offHeap+minGoMemoryMiB)*100/(100-headroomPercent) + 1
	if p.elastic() {
		p.totalMiB = max(p.totalMiB, least)
	}
	p.setTotal(p.totalMiB)
	if p.goMiB < minGoMemoryMiB {
		return p, fmt.Errorf("%w: --memory-limit-mib: %d MiB (%s) leaves %d MiB for Go's heap after the binary, the store's caches (%d MiB) and %d%% headroom; give at least %d MiB or lower --store-cache-mib",
			ErrConfig, p.totalMiB, p.source, p.goMiB, p.offHeap, headroomPercent, least)
	}
	return p, nil
}

// applyMemoryLimit sets Go's soft memory limit as planMemory says and
// returns the limit in effect for Go's heap, in bytes (0 for none), and
// the plan (totalMiB 0 when keepstate made none). An
// explicit GOMEMLIMIT in the environment is the operator's choice and wins
// over the automatic limit (not over the flag). It also tunes the C
// allocator for the clover store (malloc.Tune). It changes process-wide
// settings: call it once, before the store opens.
func applyMemoryLimit(c Config, log *slog.Logger) (int64, memoryPlan, error) {
	if c.Store == StoreClover {
		if err := malloc.Tune(); err != nil { // before Pebble's first C allocation
			log.Warn("C allocator left untuned: the store may hold more memory than it uses", "err", err)
		}
	}
	if c.MemoryLimitMiB == 0 && os.Getenv("GOMEMLIMIT") != "" {
		limit := debug.SetMemoryLimit(-1)
		log.Info("memory limit from GOMEMLIMIT", "go_limit_bytes", limit)
		if limit == math.MaxInt64 {
			return 0, memoryPlan{}, nil // GOMEMLIMIT=off
		}
		return limit, memoryPlan{}, nil
	}
	var containerMiB int64
	if c.MemoryLimitMiB == 0 {
		if b, err := memlimit.FromCgroup(); err == nil && b > 0 && b < 1<<62 {
			containerMiB = int64(b >> 20)
		}
	}
	p, err := planMemory(c, containerMiB, malloc.OffHeap)
	if err != nil || p.totalMiB == 0 {
		return 0, p, err
	}
	debug.SetMemoryLimit(p.goMiB << 20)
	log.Info("memory limit", "source", p.source, "limit_mib", p.totalMiB, "elastic", p.elastic(), "go_mib", p.goMiB, "store_off_heap_mib", p.offHeap, "headroom_mib", p.headroom)
	return p.goMiB << 20, p, nil
}

// valvePercent is the share of a memory limit at which the C allocator's
// free pages are given back (malloc.Valve): high enough that a process
// well under its limit never pays for it, low enough that the holes a
// second of block-cache churn leaves (up to 35 MiB at 1M movies) fit
// under the limit.
const valvePercent = 90

// trimValve returns the valve that keeps the C allocator's free pages
// from pushing the process over the plan p (no Bound, which never runs,
// when there is no plan or the store is not clover). The memory governor
// moves its bound when it raises an elastic plan.
func trimValve(c Config, p memoryPlan, log *slog.Logger) malloc.Valve {
	if p.totalMiB == 0 || c.Store != StoreClover {
		return malloc.Valve{}
	}
	bound := new(atomic.Int64)
	bound.Store(valveBound(p.totalMiB))
	return malloc.Valve{Bound: bound, Log: log}
}

// valveBound is the valve's bound, in bytes, under a limit of totalMiB.
func valveBound(totalMiB int64) int64 { return totalMiB * valvePercent / 100 << 20 }

// bulkMemory is the share of Go's memory limit (goLimit bytes, 0 for
// none) the clover store's bulk load may use (docstore.WithBulkMemory):
// half; the other half is the engine's (fetch buffers, caches, batches).
// 0 (no limit) leaves the bulk load its defaults.
func bulkMemory(goLimit int64) int64 { return goLimit / 2 }

// defaultCacheBudgetDocs is --cache-budget-docs without a memory limit:
// the engine's default.
var defaultCacheBudgetDocs = engine.DefaultConfig().CacheBudgetDocs

// cacheDocsPerGoMiB is how many documents --cache-budget-docs defaults to
// per MiB of Go's share of a memory limit.
const cacheDocsPerGoMiB = 120

// minAutoCacheBudgetDocs is the least --cache-budget-docs the memory limit
// sizes.
const minAutoCacheBudgetDocs = 3000

// cacheBudgetDocs returns the --cache-budget-docs in effect for the engine
// of each of jobs jobs: budget when positive (the operator's choice); none
// (0) when budget is -1, or when it is 0 (automatic) and --cache-max-docs
// was set (maxDocs > 0: the operator bounded each partition, as before the
// budget existed); else defaultCacheBudgetDocs, lowered under a memory
// limit (goLimit, Go's share in bytes; 0 for none) to cacheDocsPerGoMiB per
// MiB of it, not below minAutoCacheBudgetDocs, and split between the jobs.
//
// What the partitions hold between flushes (their changed and cached
// documents, the records built for the next flush) is most of what a
// 1M-movie uniform run keeps live. Under a 300 MiB limit with 10000 per
// partition (live heap near Go's share, so the collector ran all the
// time) a run spent a third more CPU and lost a third of its throughput;
// with a third of 14880 per partition (three partitions) it did 23–27k
// ratings/s instead of 16.5–19k, peaking at 301–308 MiB
// (docs/benchmarks.md). The budget is shared, so a failover that moves
// more partitions here shrinks each partition's share instead of
// multiplying the memory.
func cacheBudgetDocs(budget, maxDocs int, goLimit int64, jobs int) int {
	switch {
	case budget > 0:
		return budget
	case budget < 0, maxDocs > 0:
		return 0
	}
	b := defaultCacheBudgetDocs
	if goLimit > 0 {
		b = min(b, max(minAutoCacheBudgetDocs, int(min(goLimit>>20, 1<<20))*cacheDocsPerGoMiB))
	}
	return max(b/max(jobs, 1), engine.MinPartitionCacheDocs)
}
