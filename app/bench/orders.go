package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keepstate/keepstate/avro"
)

// Jobs the bench can drive (--job).
const (
	JobMovies = "movies" // keepstate's movie job (`keepstate run`)
	// JobOrders is the orders example job (examples/orders, written on the
	// job API: string keys, a JSON value), whose binary is given as
	// --keepstate-bin. Each rating of the workload is sent as an order of
	// customer c-<movie id> for the rating's amount, and the check reads
	// the customers table; phases fill, run and restore, clover only.
	JobOrders = "orders"
)

// ordersTable is the orders job's table, and the middle of its group and
// internal topic names (app.Config.JobConfig).
const ordersTable = "customers"

// encodeOrder is the Encode function of --job orders: rating r as an order
// of the orders job.
func encodeOrder(_ context.Context, r avro.Rating) ([]byte, error) {
	return fmt.Appendf(nil, `{"order_id":"o-%d","customer_id":"c-%d","amount":%s}`,
		r.MovieID, r.MovieID, strconv.FormatFloat(r.Rating, 'g', -1, 64)), nil
}

// ScanCustomers reads every customer of the orders job from a keepstate
// API at base (http://host:port) by paging through the customers table in
// the order of its total index, as the movies they stand for: the average
// is total / count, as Truth computes it.
func ScanCustomers(ctx context.Context, base string) ([]Observed, error) {
	client := &http.Client{Timeout: 30 * time.Second}
	var out []Observed
	after := ""
	for {
		u := fmt.Sprintf("%s/tables/%s?index=total&limit=%d", base, ordersTable, apiPageLimit)
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		var page struct {
			Items []struct {
				Key   string `json:"key"`
				Value struct {
					Count int64   `json:"count"`
					Total float64 `json:"total"`
				} `json:"value"`
			} `json:"items"`
			Next    string `json:"next"`
			Partial bool   `json:"partial"`
		}
		if err := getJSON(ctx, client, u, &page); err != nil {
			return nil, err
		}
		if page.Partial {
			return nil, fmt.Errorf("GET %s: partial answer", u)
		}
		for _, d := range page.Items {
			id, err := strconv.ParseInt(strings.TrimPrefix(d.Key, "c-"), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("GET %s: customer %q: %w", u, d.Key, err)
			}
			out = append(out, Observed{MovieID: id, Count: d.Value.Count, Avg: d.Value.Total / float64(d.Value.Count)})
		}
		if page.Next == "" {
			return out, nil
		}
		after = page.Next
	}
}
