package redisstore

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// movieTableSpec is the spec of the movie job's table.
var movieTableSpec = engine.TableSpec{Name: "movies",
	Indexes: []engine.IndexSpec{{Name: "avg", Kind: engine.IndexNumber}}, TiesAscending: true}

// movieTableDoc is m as the movie job's table stores it: the 8-byte
// big-endian id, a 16-byte value (count, then the sum's IEEE-754 bits,
// both big-endian) and the average as the one index value.
func movieTableDoc(m engine.MovieStats) engine.Doc {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(m.Count))
	v = binary.BigEndian.AppendUint64(v, math.Float64bits(m.Sum))
	return engine.Doc{Key: binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(m.MovieID)),
		Partition: m.Partition, Version: m.Version, Sources: m.Sources, Value: v,
		Index: []engine.IndexValue{engine.Num(m.Avg())}}
}

// sideBatches is the shared workload of BenchmarkApplySideBySide: batch i
// of partition p holds the movies [200i, 200i+1000) of p at version i+1,
// so 800 of them update a movie of the previous batch and 200 are new.
type sideBatches struct {
	p   int32
	rng *rand.Rand
}

func (w *sideBatches) batch(i int) []engine.MovieStats {
	docs := make([]engine.MovieStats, batchSize)
	base := int64(w.p)<<40 + int64(i)*200
	for j := range docs {
		docs[j] = benchMovie(base+int64(j), int64(i+1), w.rng)
		docs[j].Partition = w.p
		docs[j].Sources = map[int32]int64{w.p: int64(i + 1), w.p + 1: int64(j)}
	}
	return docs
}

// streamMovieFields are the fields of today's movie stream entries, built
// from a movie table document: movieId, avg and count.
func streamMovieFields(d engine.Doc) []any {
	id := int64(binary.BigEndian.Uint64(d.Key))
	count := int64(binary.BigEndian.Uint64(d.Value))
	sum := math.Float64frombits(binary.BigEndian.Uint64(d.Value[8:]))
	return []any{"movieId", formatInt(id), "avg", formatFloat(sum / float64(count)), "count", formatInt(count)}
}

// BenchmarkApplySideBySide applies the same 1000-document batches of the
// movie shape (800 updates, 200 inserts each) through the movie Apply and
// through a movie table's Apply, on one redis-server, alternating rounds
// of roundBatches batches; it reports the median docs/s of each, their
// ratio (table/movie), the median of the ratios of the rounds (each round
// runs both, back to back, so a machine whose load changes skews it less)
// and the server's CPU per document. Run it with -benchtime=1x: one op is
// the whole comparison.
func BenchmarkApplySideBySide(b *testing.B) {
	const rounds, roundBatches = 21, 10
	r := sharedRedis(b)
	for _, bc := range []struct {
		name      string
		streamMax int64
	}{
		{"stream", DefaultStreamMaxLen},
		{"nostream", 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			var movieRates, tableRates, movieCPU, tableCPU []float64
			for b.Loop() {
				ms, err := Open(ctx, r.URL(), WithPrefix(uniquePrefix()), WithStreamMaxLen(bc.streamMax))
				if err != nil {
					b.Fatal(err)
				}
				topts := []Option{WithPrefix(uniquePrefix())}
				if bc.streamMax > 0 {
					topts = append(topts, WithTableStream(movieTableSpec.Name,
						TableStream{Key: "rating-averages-stream", MaxLen: bc.streamMax, Fields: streamMovieFields}))
				}
				ts, err := Open(ctx, r.URL(), topts...)
				if err != nil {
					b.Fatal(err)
				}
				tb, err := ts.OpenTable(ctx, movieTableSpec)
				if err != nil {
					b.Fatal(err)
				}
				me, err := ms.Claim(ctx, 0)
				if err != nil {
					b.Fatal(err)
				}
				te, err := tb.Claim(ctx, 0)
				if err != nil {
					b.Fatal(err)
				}
				mw := &sideBatches{rng: rand.New(rand.NewPCG(1, 2))}
				tw := &sideBatches{rng: rand.New(rand.NewPCG(1, 2))}
				next := 0
				for round := range rounds {
					for k := range 2 {
						// Alternate which layout goes first.
						table := (round+k)%2 == 1
						start, cpu0 := time.Now(), serverCPU(ctx, ms)
						for i := next; i < next+roundBatches; i++ {
							if table {
								src := tw.batch(i)
								docs := make([]engine.Doc, len(src))
								for j, m := range src {
									docs[j] = movieTableDoc(m)
								}
								err = tb.Apply(ctx, engine.DocBatch{Partition: 0, Epoch: te, Docs: docs, Checkpoint: int64(i)})
							} else {
								err = ms.Apply(ctx, engine.Batch{Partition: 0, Epoch: me, Docs: mw.batch(i), Checkpoint: int64(i)})
							}
							if err != nil {
								b.Fatal(err)
							}
						}
						rate := roundBatches * batchSize / time.Since(start).Seconds()
						cpu := (serverCPU(ctx, ms) - cpu0) * 1e6 / (roundBatches * batchSize)
						if table {
							tableRates, tableCPU = append(tableRates, rate), append(tableCPU, cpu)
						} else {
							movieRates, movieCPU = append(movieRates, rate), append(movieCPU, cpu)
						}
					}
					next += roundBatches
				}
				_ = ms.Reset(ctx)
				_ = tb.(*table).Reset(ctx)
				_ = ms.Close()
				_ = ts.Close()
			}
			mm, tm := median(movieRates), median(tableRates)
			paired := make([]float64, len(movieRates))
			for i := range paired {
				paired[i] = tableRates[i] / movieRates[i]
			}
			b.Logf("movie docs/s %.0f, table docs/s %.0f, ratios %.2f", movieRates, tableRates, paired)
			b.ReportMetric(mm, "movie-docs/s")
			b.ReportMetric(tm, "table-docs/s")
			b.ReportMetric(tm/mm, "table/movie")
			b.ReportMetric(median(paired), "paired-table/movie")
			b.ReportMetric(median(movieCPU), "movie-server-µs/doc")
			b.ReportMetric(median(tableCPU), "table-server-µs/doc")
		})
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
