package storetest

import (
	"math/rand/v2"
	"slices"

	"github.com/keepstate/keepstate/engine"
)

// model is the brute-force reference for range queries: every document, in
// memory, filtered and sorted on each query.
type model map[int64]engine.MovieStats

func cursorOf(m engine.MovieStats) engine.Cursor {
	return engine.Cursor{Avg: m.Avg(), MovieID: m.MovieID}
}

// query returns every document matching q's bounds and cursor, in range
// order, ignoring the limit.
func (md model) query(q engine.RangeQuery) []engine.MovieStats {
	var out []engine.MovieStats
	for _, m := range md {
		a := m.Avg()
		if a < q.MinAvg || a > q.MaxAvg {
			continue
		}
		if q.After != nil && !q.After.Before(cursorOf(m)) {
			continue
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(x, y engine.MovieStats) int {
		cx, cy := cursorOf(x), cursorOf(y)
		switch {
		case cx.Before(cy):
			return -1
		case cy.Before(cx):
			return 1
		}
		return 0
	})
	return out
}

// rangeData returns n documents in partition p with many ties: averages
// come from a small set, reached through different counts and sums, and
// ids are spread over negative and positive values.
func rangeData(seed uint64, n int, p int32) []engine.MovieStats {
	r := rand.New(rand.NewPCG(seed, 7))
	avgs := []float64{0, 2.5, 5, 7.5, 8, 10}
	counts := []int64{1, 2, 4}
	seen := map[int64]bool{}
	var docs []engine.MovieStats
	for len(docs) < n {
		id := int64(r.IntN(4*n)) - int64(n)
		if seen[id] {
			continue
		}
		seen[id] = true
		var count int64
		var sum float64
		if r.IntN(8) == 0 { // one third, reached as 1/3 and 2/6: equal averages from different sums
			count = int64(3 * (1 + r.IntN(2)))
			sum = float64(count / 3)
		} else {
			count = counts[r.IntN(len(counts))]
			sum = avgs[r.IntN(len(avgs))] * float64(count)
		}
		docs = append(docs, engine.MovieStats{MovieID: id, Partition: p, Count: count, Sum: sum,
			Version: int64(len(docs) + 1), Sources: map[int32]int64{p: int64(len(docs))}})
	}
	return docs
}

// modelOf returns the model holding docs.
func modelOf(docs []engine.MovieStats) model {
	md := model{}
	for _, d := range docs {
		md[d.MovieID] = d
	}
	return md
}
