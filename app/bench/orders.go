package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/keepstate/keepstate/avro"
)

// Jobs the bench can drive (--job).
const (
	JobMovies = "movies" // keepstate's movie job (`keepstate run`)
	// JobOrders is the orders example job (examples/orders, its binary given
	// as --keepstate-bin): each rating is sent as an order of customer
	// c-<movie id> for the rating's amount, and the check reads the
	// customers table; phases fill, run and restore, clover only.
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
// API at base by paging through the customers table's total index, as the
// movies they stand for (average total / count, as Truth computes it).
func ScanCustomers(ctx context.Context, base string) ([]Observed, error) {
	u := fmt.Sprintf("%s/tables/%s?index=total&limit=%d", base, ordersTable, apiPageLimit)
	return scanPages(ctx, u, func(u string, p *struct {
		Items []struct {
			Key   string `json:"key"`
			Value struct {
				Count int64   `json:"count"`
				Total float64 `json:"total"`
			} `json:"value"`
		} `json:"items"`
		Next    string `json:"next"`
		Partial bool   `json:"partial"`
	}, emit func(Observed)) (string, error) {
		if p.Partial {
			return "", fmt.Errorf("GET %s: partial answer", u)
		}
		for _, d := range p.Items {
			id, err := strconv.ParseInt(strings.TrimPrefix(d.Key, "c-"), 10, 64)
			if err != nil {
				return "", fmt.Errorf("GET %s: customer %q: %w", u, d.Key, err)
			}
			emit(Observed{MovieID: id, Count: d.Value.Count, Avg: d.Value.Total / float64(d.Value.Count)})
		}
		return p.Next, nil
	})
}
