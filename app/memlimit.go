package app

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/keepstate/keepstate/engine"
)

const (
	// minGoMemoryMiB is the least limit left for Go's heap that
	// applyMemoryLimit accepts: below it the collector would run all the time.
	minGoMemoryMiB = 64
	// baseMiB is what the process holds that Go's memory limit does not
	// count, mostly the binary's resident code and data ("the binary" in
	// docs/benchmarks.md, "Memory").
	baseMiB = 48
	// headroomPercent is the share of the limit kept free: Go's limit is
	// soft, and the heap overshoots it while the collector catches up.
	headroomPercent = 3
)

// DefaultMemoryTargetMiB is the memory target of a process given no
// --memory-limit-mib outside a container: the process plans its caches
// and collector for it, and the memory governor raises it when the live
// heap needs more (elastic), so it is never a cap.
const DefaultMemoryTargetMiB = 300

// memoryPlan is the soft memory limit a Config asks for. Everything the
// process caches is in Go's heap, clover's block cache and memtables
// included (Pebble allocates them there in a CGO_ENABLED=0 build), so Go
// gets the limit less baseMiB and the headroom.
type memoryPlan struct {
	totalMiB int64  // the process's limit, 0 for none
	goMiB    int64  // of it, Go's soft limit (GOMEMLIMIT)
	headroom int64  // MiB kept free (headroomPercent of totalMiB)
	source   string // flag, container, default or none
}

// elastic reports whether p is the default target, which the governor
// raises when the live heap needs more (memoryGovernor.raise).
func (p memoryPlan) elastic() bool { return p.source == "default" }

// setTotal makes totalMiB the limit; Go gets what baseMiB and the headroom leave.
func (p *memoryPlan) setTotal(totalMiB int64) {
	p.totalMiB = totalMiB
	p.headroom = totalMiB * headroomPercent / 100
	p.goMiB = totalMiB - baseMiB - p.headroom
}

// planMemory works out the limit: --memory-limit-mib when positive; for 0,
// 90% of containerMiB if set, else the elastic DefaultMemoryTargetMiB; -1
// makes none. A limit that leaves Go less than minGoMemoryMiB is ErrConfig.
func planMemory(c Config, containerMiB int64) (memoryPlan, error) {
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
	p.setTotal(p.totalMiB)
	if p.goMiB < minGoMemoryMiB {
		least := (baseMiB+minGoMemoryMiB)*100/(100-headroomPercent) + 1
		return p, fmt.Errorf("%w: --memory-limit-mib: %d MiB (%s) leaves %d MiB for Go's heap after the binary (%d MiB) and %d%% headroom; give at least %d MiB",
			ErrConfig, p.totalMiB, p.source, p.goMiB, baseMiB, headroomPercent, least)
	}
	return p, nil
}

// applyMemoryLimit sets Go's soft memory limit as planMemory says and
// returns Go's limit in bytes (0 for none) and the plan (totalMiB 0 when
// keepstate made none). An explicit GOMEMLIMIT wins over the automatic
// limit, not over the flag. It sets a process-wide value: call it once,
// before the store opens.
func applyMemoryLimit(c Config, log *slog.Logger) (int64, memoryPlan, error) {
	if c.MemoryLimitMiB == 0 && os.Getenv("GOMEMLIMIT") != "" {
		limit := debug.SetMemoryLimit(-1)
		log.Info("memory limit from GOMEMLIMIT", "go_limit_bytes", limit)
		if limit == math.MaxInt64 {
			limit = 0 // GOMEMLIMIT=off
		}
		return limit, memoryPlan{}, nil
	}
	var containerMiB int64
	if c.MemoryLimitMiB == 0 {
		if b, err := memlimit.FromCgroup(); err == nil && b > 0 && b < 1<<62 {
			containerMiB = int64(b >> 20)
		}
	}
	p, err := planMemory(c, containerMiB)
	if err != nil || p.totalMiB == 0 {
		return 0, p, err
	}
	debug.SetMemoryLimit(p.goMiB << 20)
	log.Info("memory limit", "source", p.source, "limit_mib", p.totalMiB, "elastic", p.elastic(), "go_mib", p.goMiB, "base_mib", baseMiB, "headroom_mib", p.headroom)
	return p.goMiB << 20, p, nil
}

// bulkMemory is the share of Go's memory limit (goLimit bytes, 0 for
// none: the bulk load's defaults) the clover store's bulk load may use:
// half of what Pebble's block cache and memtables (storeCache bytes, in
// Go's heap) leave; the other half is the engine's.
func bulkMemory(goLimit, storeCache int64) int64 {
	if goLimit <= 0 {
		return 0
	}
	return max(goLimit-storeCache, goLimit/4) / 2
}

// defaultCacheBudgetDocs is --cache-budget-docs without a memory limit.
var defaultCacheBudgetDocs = engine.DefaultConfig().CacheBudgetDocs

// Under a memory limit --cache-budget-docs defaults to cacheDocsPerGoMiB
// per MiB of Go's share, at least minAutoCacheBudgetDocs.
const (
	cacheDocsPerGoMiB      = 120
	minAutoCacheBudgetDocs = 3000
)

// cacheBudgetDocs returns the --cache-budget-docs of each job's engine:
// budget when positive; none (0) for -1, or for 0 with --cache-max-docs set
// (maxDocs > 0); else defaultCacheBudgetDocs, lowered under a memory limit
// (goLimit, Go's share in bytes) as the constants above say, split between
// the jobs. What partitions hold between flushes is most of a 1M-movie
// uniform run's live heap: a budget keeping it near Go's share makes the
// collector run all the time, costing more than the cache saves. The
// budget is shared, so a failover that moves partitions here shrinks each
// partition's share instead of multiplying the memory.
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
