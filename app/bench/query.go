package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Query phase settings: queryClients concurrent clients send
// Config.Queries requests in all, one in every queryRangeEvery a range
// query (the top page of minAvg=8), the others key lookups.
const (
	queryClients    = 4
	queryRangeEvery = 20
	queryRangePath  = "/movies?minAvg=8&limit=100"
)

// Latency is the distribution of one kind of query's latency, measured by
// the client from sending the request to reading the whole answer.
type Latency struct {
	Count     int     `json:"count"`
	P50Micros float64 `json:"p50Micros"`
	P99Micros float64 `json:"p99Micros"`
}

// String is "p50 85 µs, p99 410 µs (40000)".
func (l Latency) String() string {
	return fmt.Sprintf("p50 %.0f µs, p99 %.0f µs (%d)", l.P50Micros, l.P99Micros, l.Count)
}

// latencyOf sorts ds and returns their p50 and p99.
func latencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))]) / float64(time.Microsecond)
	}
	return Latency{Count: len(ds), P50Micros: at(0.50), P99Micros: at(0.99)}
}

// query times the child's API: key lookups of random rated movies (each
// answer checked exact against the truth) mixed with range queries, from
// queryClients clients at once, as fast as the child answers.
func (b *bench) query(ctx context.Context) (PhaseResult, error) {
	pr := PhaseResult{Phase: PhaseQuery, Unit: "queries/s"}
	if err := b.ensureChild(ctx); err != nil {
		return pr, err
	}
	if err := b.waitReady(ctx); err != nil {
		return pr, b.child.Failed(err)
	}
	ids := b.truth.IDs()
	if len(ids) == 0 {
		return pr, fmt.Errorf("no movies rated before the query phase")
	}
	var (
		mu             sync.Mutex
		lookups, pages []time.Duration
		firstErr       error
		wg             sync.WaitGroup
	)
	start := time.Now()
	for c := range queryClients {
		wg.Go(func() {
			client := &http.Client{Timeout: 5 * time.Second}
			rnd := rand.New(rand.NewPCG(b.cfg.Seed, uint64(c)))
			var mine, myPages []time.Duration
			timed := func(u string, v any, into *[]time.Duration) error {
				t0 := time.Now()
				err := getJSON(ctx, client, u, v)
				if err == nil {
					*into = append(*into, time.Since(t0))
				}
				return err
			}
			var err error
			for i := 0; i < b.cfg.Queries/queryClients && err == nil && ctx.Err() == nil; i++ {
				if i%queryRangeEvery == queryRangeEvery-1 {
					var page struct {
						Movies []struct{} `json:"movies"`
					}
					err = timed(b.api+queryRangePath, &page, &myPages)
					continue
				}
				id := ids[rnd.IntN(len(ids))]
				var m struct {
					Count  int64   `json:"count"`
					Rating float64 `json:"rating"`
				}
				err = timed(fmt.Sprintf("%s/movies/%d", b.api, id), &m, &mine)
				if want, _ := b.truth.Get(id); err == nil && (m.Count != want.Count || m.Rating != want.Avg()) {
					err = fmt.Errorf("GET /movies/%d: count %d avg %v, want count %d avg %v",
						id, m.Count, m.Rating, want.Count, want.Avg())
				}
			}
			mu.Lock()
			defer mu.Unlock()
			lookups, pages = append(lookups, mine...), append(pages, myPages...)
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if firstErr != nil {
		return pr, b.child.Failed(firstErr)
	}
	lk, rg := latencyOf(lookups), latencyOf(pages)
	pr.Lookup, pr.Range = &lk, &rg
	pr.Records = int64(lk.Count + rg.Count)
	pr.Note = fmt.Sprintf("%d clients; GET /movies/{id} %s; GET %s %s", queryClients, lk, queryRangePath, rg)
	if err := b.measure(ctx, &pr, time.Now()); err != nil {
		return pr, err
	}
	// The phase's time and rate are the queries', not since the start.
	pr.Seconds = took.Seconds()
	pr.Rate = float64(pr.Records) / pr.Seconds
	return pr, nil
}
