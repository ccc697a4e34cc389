package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// Observed is one movie as a system under test reports it. Count is -1
// when the system only reports the average (an output topic).
type Observed struct {
	MovieID int64
	Count   int64
	Avg     float64
}

// CheckReport is the result of comparing observed movies with the Truth.
type CheckReport struct {
	Movies   int      `json:"movies"`   // movies in the truth
	Exact    int      `json:"exact"`    // observed with exactly the true count and average
	Wrong    int      `json:"wrong"`    // observed with another count or average
	Missing  int      `json:"missing"`  // in the truth, not observed
	Extra    int      `json:"extra"`    // observed, never rated (or observed twice)
	Examples []string `json:"examples"` // a few of the differences
}

// OK reports whether every movie is exact and nothing else was observed.
func (r CheckReport) OK() bool { return r.Exact == r.Movies && r.Wrong == 0 && r.Extra == 0 }

// String is "62000/62000 exact" plus the differences, if any.
func (r CheckReport) String() string {
	s := fmt.Sprintf("%d/%d exact", r.Exact, r.Movies)
	if r.OK() {
		return s
	}
	s += fmt.Sprintf(" (%d wrong, %d missing, %d extra", r.Wrong, r.Missing, r.Extra)
	if len(r.Examples) > 0 {
		s += "; e.g. " + strings.Join(r.Examples, "; ")
	}
	return s + ")"
}

// maxExamples bounds CheckReport.Examples.
const maxExamples = 5

// Check compares obs with the truth: every rated movie must be observed
// once with its exact count (when obs has one) and its exact average
// (sum / count; ratings are multiples of 0.5, so sums do not depend on the
// order they were added in).
func (t *Truth) Check(obs []Observed) CheckReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := CheckReport{Movies: len(t.movies)}
	example := func(format string, args ...any) {
		if len(r.Examples) < maxExamples {
			r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
		}
	}
	seen := make(map[int64]bool, len(obs))
	for _, o := range obs {
		want, ok := t.movies[o.MovieID]
		if !ok || seen[o.MovieID] {
			r.Extra++
			example("movie %d observed but not expected (or twice)", o.MovieID)
			continue
		}
		seen[o.MovieID] = true
		if (o.Count >= 0 && o.Count != want.Count) || o.Avg != want.Avg() {
			r.Wrong++
			example("movie %d: count %d avg %v, want count %d avg %v", o.MovieID, o.Count, o.Avg, want.Count, want.Avg())
			continue
		}
		r.Exact++
	}
	for id := range t.movies {
		if !seen[id] {
			r.Missing++
			example("movie %d missing", id)
		}
	}
	sort.Strings(r.Examples)
	return r
}

// apiPageLimit is the page size ScanAPI asks for (the API's maximum).
const apiPageLimit = 1000

// ScanAPI reads every movie from a keepstate API at base (http://host:port)
// by paging through GET /movies.
func ScanAPI(ctx context.Context, base string) ([]Observed, error) {
	u := fmt.Sprintf("%s/movies?limit=%d", base, apiPageLimit)
	return scanPages(ctx, u, func(_ string, p *struct {
		Movies []struct {
			MovieID int64   `json:"movieId"`
			Rating  float64 `json:"rating"`
			Count   int64   `json:"count"`
		} `json:"movies"`
		Next string `json:"next"`
	}, emit func(Observed)) (string, error) {
		for _, m := range p.Movies {
			emit(Observed{MovieID: m.MovieID, Count: m.Count, Avg: m.Rating})
		}
		return p.Next, nil
	})
}

// scanPages GETs first, then first&after=<cursor> while read, given each
// page decoded into a P, returns a cursor; read emits the page's movies.
func scanPages[P any](ctx context.Context, first string,
	read func(u string, page *P, emit func(Observed)) (string, error)) ([]Observed, error) {
	client := &http.Client{Timeout: 30 * time.Second}
	var out []Observed
	emit := func(o Observed) { out = append(out, o) }
	for u := first; ; {
		var page P
		if err := getJSON(ctx, client, u, &page); err != nil {
			return nil, err
		}
		next, err := read(u, &page, emit)
		if err != nil {
			return nil, err
		}
		if next == "" {
			return out, nil
		}
		u = first + "&after=" + url.QueryEscape(next)
	}
}

// getJSON decodes the 200 answer of GET u into v; a nil v only checks the
// status.
func getJSON(ctx context.Context, client *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	if v == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}

// ScanOutputTopic reads topic (Long movie key, Double average, as Java's
// serializers write them) from the beginning to its last committed record
// and returns the last average of every movie. Records whose key or value
// do not decode are an error.
func ScanOutputTopic(ctx context.Context, brokers []string, topic string) ([]Observed, error) {
	client, consumer, err := benchClient(brokers)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	defer consumer.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	last := map[int64]float64{}
	for _, p := range parts {
		low, end, err := committedEnd(ctx, client, consumer, topic, p)
		if err != nil {
			return nil, err
		}
		if end <= low {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, low)
		if err != nil {
			return nil, fmt.Errorf("read %s/%d: %w", topic, p, err)
		}
		for done := false; !done; {
			select {
			case m := <-pc.Messages():
				id, kerr := engine.Int64Keys.Decode(m.Key)
				avg, verr := engine.DecodeDouble(m.Value)
				if kerr != nil || verr != nil {
					pc.Close()
					return nil, fmt.Errorf("%s/%d@%d: not a Long key and Double value", topic, p, m.Offset)
				}
				last[id] = avg
				done = m.Offset >= end-1
			case <-ctx.Done():
				pc.Close()
				return nil, ctx.Err()
			}
		}
		pc.Close()
	}
	out := make([]Observed, 0, len(last))
	for id, avg := range last {
		out = append(out, Observed{MovieID: id, Count: -1, Avg: avg})
	}
	return out, nil
}
