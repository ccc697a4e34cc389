package storebench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// partitions is the number of repartition partitions the documents are
// spread over (partition = movie id % partitions).
const partitions = 3

// zipfS is the popularity skew of app.NewGenerator (app/produce.go).
const zipfS = 1.07

// movie returns version version of movie id: a count of 20..400 ratings and
// an average on the 0.05 grid over 0..10. The count is a multiple of 20 and
// the sum a whole number, so Sum/Count is the same float64 for every movie
// with the same grid point: about N/201 movies tie on each average.
func movie(id, version int64) engine.MovieStats {
	h := uint64(id)*0x9E3779B97F4A7C15 + uint64(version)*0xBF58476D1CE4E5B9
	h ^= h >> 31
	h *= 0x94D049BB133111EB
	h ^= h >> 29
	m := int64(h%20) + 1       // count = 20m
	k := int64((h >> 8) % 201) // average = k/20
	p := int32(id % partitions)
	return engine.MovieStats{MovieID: id, Partition: p, Count: 20 * m, Sum: float64(k * m),
		Version: version, Sources: map[int32]int64{p: version}}
}

// writer is the writing side of one store: the last version written of every
// movie and the next checkpoint of every partition, kept across
// sub-benchmarks so every batch follows the store contract (versions rise
// per document, checkpoints rise per partition). Batches of different
// partitions may be built concurrently; batches of one partition may not.
type writer struct {
	versions []int64 // index: movie id (1..n)
	next     [partitions]int64
}

func newWriter(n int) *writer { return &writer{versions: make([]int64, n+1)} }

// batch returns the batch of partition p, claimed with epoch, that writes
// the next version of each movie in ids (all of partition p, distinct).
func (w *writer) batch(p int32, epoch int64, ids []int64) engine.Batch {
	docs := make([]engine.MovieStats, len(ids))
	for i, id := range ids {
		w.versions[id]++
		docs[i] = movie(id, w.versions[id])
	}
	w.next[p] += int64(len(ids))
	return engine.Batch{Partition: p, Epoch: epoch, Docs: docs, Checkpoint: w.next[p]}
}

// picker draws the movie ids of one batch.
type picker struct {
	draw func() int64 // one movie id in 1..n
	seen map[int64]bool
}

// uniformPicker draws movie ids 1..n with equal probability.
func uniformPicker(n int, r *rand.Rand) *picker {
	return &picker{draw: func() int64 { return 1 + r.Int64N(int64(n)) }, seen: map[int64]bool{}}
}

// zipfPicker draws movie ids 1..n like app.NewGenerator: Zipf with s=1.07,
// v=2, so a few movies get most ratings.
func zipfPicker(n int, r *rand.Rand) *picker {
	z := rand.NewZipf(r, zipfS, 2, uint64(n-1))
	return &picker{draw: func() int64 { return int64(z.Uint64()) + 1 }, seen: map[int64]bool{}}
}

var errTooFewIDs = errors.New("too few distinct movie ids")

// ids returns size distinct movie ids of partition p and how many draws of
// that partition it took (the ratings the engine's write-behind cache would
// have folded into these size writes; repeats included).
func (pk *picker) ids(p int32, size int) (ids []int64, draws int, err error) {
	clear(pk.seen)
	ids = make([]int64, 0, size)
	for tries := 0; len(ids) < size; tries++ {
		if tries > 1000*size*partitions {
			return nil, draws, fmt.Errorf("%w: %d of partition %d after %d draws", errTooFewIDs, len(ids), p, tries)
		}
		id := pk.draw()
		if int32(id%partitions) != p {
			continue
		}
		draws++
		if !pk.seen[id] {
			pk.seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, draws, nil
}

// samples are per-operation durations, reported as percentiles.
type samples []time.Duration

func (s samples) percentile(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// report adds p50 and p99 (in µs) to the benchmark's metrics.
func (s samples) report(b *testing.B) {
	if len(s) == 0 {
		return
	}
	b.ReportMetric(float64(s.percentile(0.50).Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(s.percentile(0.99).Nanoseconds())/1e3, "p99-µs")
}
