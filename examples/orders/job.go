package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/keepstate/keepstate/engine"
)

// Order is one order event of the input topic, as JSON:
//
//	{"order_id":"o-1","customer_id":"c-42","amount":12.5}
type Order struct {
	OrderID    string  `json:"order_id"`
	CustomerID string  `json:"customer_id"`
	Amount     float64 `json:"amount"`
}

// Totals is the aggregate of one customer: how many orders, their summed
// and their largest amount. Its zero value is a customer without orders.
type Totals struct {
	Count int64   `json:"count"`
	Total float64 `json:"total"`
	Max   float64 `json:"max"`
}

// add adds o to t: the job's Add function.
func (t *Totals) add(o Order) {
	t.Count++
	t.Total += o.Amount
	t.Max = max(t.Max, o.Amount)
}

// ErrBadOrder is wrapped by every reason an order is rejected for: not a
// JSON object, no customer id, no amount, an amount that is negative, not
// finite or above MaxAmount. Rejected orders go to the job's dead-letter
// topic with the error text in the keepstate.dlq.reason header.
var ErrBadOrder = errors.New("bad order")

// MaxAmount is the largest amount an order may have. It keeps every total
// finite (a number index must be, and JSON has no infinity): even 2^63
// orders of MaxAmount sum to about 1e31.
const MaxAmount = 1e12

// CustomersTable is the name of the job: its table (GET /tables/customers), and the middle
// of its consumer group and internal topic names (<application-id>-customers-changelog, ...).
const CustomersTable = "customers"

// CustomersJob is the orders example's job: JSON orders keyed by customer
// id, counted, summed and maxed per customer, indexed by total so that
// "customers who spent at least 1000" is an index range query, and each
// customer's new totals written as JSON to the output topic.
func CustomersJob() engine.Job[string, Order, Totals] {
	return engine.Job[string, Order, Totals]{
		Name:    CustomersTable,
		Decode:  decodeOrder,
		Key:     customerOf,
		Keys:    engine.StringKeys,
		Add:     (*Totals).add,
		Indexes: []engine.Index[Totals]{engine.NumberIndex("total", func(t Totals) float64 { return t.Total })},
		Output:  appendTotalsJSON,
		// Values and Changelog are left nil: Totals is stored and written
		// to the changelog as JSON (engine.JSONCodec).
	}
}

// decodeOrder reads one input record. It rejects what cannot be an order;
// the customer id is checked by customerOf.
func decodeOrder(_ context.Context, b []byte) (Order, error) {
	o := Order{Amount: math.NaN()} // JSON has no NaN: still NaN after decoding means no amount
	if err := json.Unmarshal(b, &o); err != nil {
		return Order{}, fmt.Errorf("%w: not a JSON order object: %w", ErrBadOrder, err)
	}
	switch a := o.Amount; {
	case math.IsNaN(a):
		return Order{}, fmt.Errorf("%w: order %q has no amount", ErrBadOrder, o.OrderID)
	case math.IsInf(a, 0):
		return Order{}, fmt.Errorf("%w: order %q amount %v is not a finite number", ErrBadOrder, o.OrderID, a)
	case a < 0:
		return Order{}, fmt.Errorf("%w: order %q amount %v is negative", ErrBadOrder, o.OrderID, a)
	case a > MaxAmount:
		return Order{}, fmt.Errorf("%w: order %q amount %v is above %g", ErrBadOrder, o.OrderID, a, MaxAmount)
	}
	return o, nil
}

// customerOf returns the aggregation key of o: its customer id, which must
// be 1 to engine.MaxKeyBytes bytes of UTF-8.
func customerOf(o Order) (string, error) {
	switch {
	case o.CustomerID == "":
		return "", fmt.Errorf("%w: order %q has no customer_id", ErrBadOrder, o.OrderID)
	case len(o.CustomerID) > engine.MaxKeyBytes:
		return "", fmt.Errorf("%w: order %q customer_id has %d bytes, at most %d", ErrBadOrder, o.OrderID, len(o.CustomerID), engine.MaxKeyBytes)
	case !utf8.ValidString(o.CustomerID):
		return "", fmt.Errorf("%w: order %q customer_id is not UTF-8", ErrBadOrder, o.OrderID)
	}
	return o.CustomerID, nil
}

// appendTotalsJSON appends t as JSON ({"count":3,"total":40.5,"max":20}), the value of
// the job's output records. decodeOrder's bounds keep every number finite, as JSON needs.
func appendTotalsJSON(dst []byte, t Totals) []byte {
	dst = strconv.AppendInt(append(dst, `{"count":`...), t.Count, 10)
	dst = strconv.AppendFloat(append(dst, `,"total":`...), t.Total, 'g', -1, 64)
	return append(strconv.AppendFloat(append(dst, `,"max":`...), t.Max, 'g', -1, 64), '}')
}
