package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/keepstate/keepstate/app"
)

// produceConfig configures `orders produce`, the order generator, and
// where it sends the orders (Sender: Rate 0 is as fast as possible).
type produceConfig struct {
	app.Sender
	Count     int64     // orders to generate (0: until ctx ends)
	Customers int64     // distinct customer ids c-1..c-N, Zipf-skewed: a few order a lot, most a little
	Seed      uint64    // makes the generated sequence reproducible
	BadEvery  int64     // makes every BadEvery-th order a bad one (see badOrders; 0: none)
	Stdin     io.Reader // when set, its lines are sent as they are instead of generated orders
}

// defaultProduce returns 10000 orders over 500 customers into topic orders of the local broker.
func defaultProduce() produceConfig {
	return produceConfig{Sender: app.Sender{Brokers: []string{"localhost:9092"}, Topic: defaultInputTopic,
		Partitions: 3, ClientID: "keepstate-orders-produce"}, Count: 10000, Customers: 500, Seed: 1}
}

// validate checks the produce settings.
func (p produceConfig) validate() error {
	var errs []error
	if len(p.Brokers) == 0 || p.Topic == "" {
		errs = append(errs, errors.New("--brokers and --topic are required"))
	}
	if p.Count < 0 || p.Customers <= 0 || p.Rate < 0 || math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0) || p.BadEvery < 0 || p.Partitions <= 0 {
		errs = append(errs, errors.New("--n >= 0, --customers > 0, a finite --rate >= 0, --bad-every >= 0 and --partitions > 0 are required"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", app.ErrConfig, errors.Join(errs...))
	}
	return nil
}

// generated is one record the generator makes: its key and value, the
// order it was made from, and whether the job accepts it.
type generated struct {
	key, value []byte
	order      Order
	valid      bool
}

// generator makes a reproducible sequence of orders. Amounts are multiples of 0.25 up to
// 100: their sums are exact in float64 in any order, so tests compare totals exactly.
type generator struct {
	rnd      *rand.Rand
	zipf     *rand.Zipf
	seed     uint64
	n        int64
	badEvery int64
}

// badOrders are the formats of the bad orders, of order id, customer id
// and amount, that the generator takes turns at: no customer, a negative
// amount, no amount, broken JSON.
var badOrders = [...]string{
	`{"order_id":%[1]q,"amount":%[3]g}`,
	`{"order_id":%[1]q,"customer_id":%[2]q,"amount":-%[3]g}`,
	`{"order_id":%[1]q,"customer_id":%[2]q}`,
	`{"order_id":%[1]q,"customer_id":%[2]q,"amount":`,
}

// newGenerator returns a generator over customers c-1..c-<customers>.
func newGenerator(customers int64, seed uint64, badEvery int64) *generator {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &generator{rnd: r, zipf: rand.NewZipf(r, 1.07, 2, uint64(customers-1)), seed: seed, badEvery: badEvery}
}

// next returns the next record.
func (g *generator) next() generated {
	g.n++
	customer := "c-" + strconv.FormatUint(g.zipf.Uint64()+1, 10)
	id := "o-" + strconv.FormatUint(g.seed, 10) + "-" + strconv.FormatInt(g.n, 10)
	amount := float64(1+g.rnd.IntN(400)) / 4
	format, valid := `{"order_id":%[1]q,"customer_id":%[2]q,"amount":%[3]g}`, true
	if g.badEvery > 0 && g.n%g.badEvery == 0 {
		format, valid = badOrders[(g.n/g.badEvery)%4], false
	}
	return generated{key: []byte(customer), value: fmt.Appendf(nil, format, id, customer, amount),
		order: Order{OrderID: id, CustomerID: customer, Amount: amount}, valid: valid}
}

// produceOrders is `orders produce`: it sends generated orders (or the lines of p.Stdin),
// keyed by customer id, and returns how many the broker acknowledged.
func produceOrders(ctx context.Context, p produceConfig, log *slog.Logger) (int64, error) {
	if err := p.validate(); err != nil {
		return 0, err
	}
	g := newGenerator(p.Customers, p.Seed, p.BadEvery)
	next := func() (generated, bool, error) { // p.Count orders, endless when 0
		if p.Count > 0 && g.n >= p.Count {
			return generated{}, false, nil
		}
		return g.next(), true, nil
	}
	if p.Stdin != nil {
		next = rawLines(p.Stdin)
	}
	p.Log = log
	return app.SendRecords(ctx, p.Sender, func() (app.Record, bool, error) {
		g, ok, err := next()
		return app.Record{Key: g.key, Value: g.value}, ok, err // g.key is nil when there is none
	})
}

// rawLines returns the non-blank lines of r, each as a record value as it
// is (so that bad orders can be sent too), keyed by its customer_id when
// it has one.
func rawLines(r io.Reader) func() (generated, bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20) // a line is at most 1 MiB
	return func() (generated, bool, error) {
		for sc.Scan() {
			b := bytes.TrimSpace(sc.Bytes())
			if len(b) == 0 {
				continue
			}
			g := generated{value: bytes.Clone(b)}
			var o Order
			if json.Unmarshal(b, &o) == nil && o.CustomerID != "" {
				g.key = []byte(o.CustomerID)
			}
			return g, true, nil
		}
		if err := sc.Err(); err != nil {
			return generated{}, false, fmt.Errorf("read stdin: %w", err)
		}
		return generated{}, false, nil
	}
}
