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

// produceConfig configures `orders produce`, the order generator.
type produceConfig struct {
	Brokers []string
	Topic   string
	// Count is how many orders to generate (0: until ctx ends).
	Count int64
	// Customers is the number of distinct customer ids (c-1..c-N), their
	// popularity Zipf-skewed: a few customers order a lot, most a little.
	Customers int64
	// Rate is orders per second (0: as fast as possible).
	Rate float64
	// Seed makes the generated sequence reproducible.
	Seed uint64
	// BadEvery makes every BadEvery-th generated order a bad one (no
	// customer, negative amount, no amount, broken JSON; 0: none).
	BadEvery int64
	// Partitions of the topic if it must be created.
	Partitions int32
	// Stdin, when set, is read as lines sent as they are (one order per
	// line) instead of generating orders.
	Stdin io.Reader
}

// defaultProduce returns the produce defaults: 10000 orders over 500
// customers into topic orders of the local broker.
func defaultProduce() produceConfig {
	return produceConfig{Brokers: []string{"localhost:9092"}, Topic: defaultInputTopic,
		Count: 10000, Customers: 500, Seed: 1, Partitions: 3}
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

// generated is one record the generator makes: its key and value, and for
// a valid order the order itself.
type generated struct {
	key, value []byte
	order      Order
	valid      bool
}

// generator makes a reproducible sequence of orders. Amounts are multiples
// of 0.25 from 0.25 to 100: sums of them are exact in float64, whatever
// the order they are added in, so tests can compare totals exactly. Not
// safe for concurrent use.
type generator struct {
	rnd      *rand.Rand
	zipf     *rand.Zipf
	seed     uint64
	n        int64
	badEvery int64
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
	if g.badEvery > 0 && g.n%g.badEvery == 0 {
		var v string
		switch (g.n / g.badEvery) % 4 {
		case 0:
			v = fmt.Sprintf(`{"order_id":%q,"amount":%g}`, id, amount)
		case 1:
			v = fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"amount":%g}`, id, customer, -amount)
		case 2:
			v = fmt.Sprintf(`{"order_id":%q,"customer_id":%q}`, id, customer)
		default:
			v = fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"amount":`, id, customer)
		}
		return generated{key: []byte(customer), value: []byte(v)}
	}
	o := Order{OrderID: id, CustomerID: customer, Amount: amount}
	v := fmt.Appendf(nil, `{"order_id":%q,"customer_id":%q,"amount":%s}`, id, customer, strconv.FormatFloat(amount, 'g', -1, 64))
	return generated{key: []byte(customer), value: v, order: o, valid: true}
}

// produceOrders is `orders produce`: it sends generated orders (or the
// lines of p.Stdin), keyed by customer id, and returns how many the broker
// acknowledged.
func produceOrders(ctx context.Context, p produceConfig, log *slog.Logger) (int64, error) {
	if err := p.validate(); err != nil {
		return 0, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	next := generatedOrders(p)
	if p.Stdin != nil {
		next = rawLines(p.Stdin)
	}
	return app.SendRecords(ctx, app.Sender{Brokers: p.Brokers, Topic: p.Topic, Partitions: p.Partitions, Rate: p.Rate,
		ClientID: "keepstate-orders-produce", Log: log}, func() (app.Record, bool, error) {
		g, ok, err := next()
		if err != nil || !ok {
			return app.Record{}, ok, err
		}
		return app.Record{Key: g.key, Value: g.value}, true, nil // g.key is nil when there is none
	})
}

// generatedOrders returns p.Count generated orders (endless when 0).
func generatedOrders(p produceConfig) func() (generated, bool, error) {
	g := newGenerator(p.Customers, p.Seed, p.BadEvery)
	return func() (generated, bool, error) {
		if p.Count > 0 && g.n >= p.Count {
			return generated{}, false, nil
		}
		return g.next(), true, nil
	}
}

// maxLineBytes bounds one line of --stdin.
const maxLineBytes = 1 << 20

// rawLines returns the non-blank lines of r, each as a record value as it
// is (so that bad orders can be sent too), keyed by its customer_id when
// it has one.
func rawLines(r io.Reader) func() (generated, bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxLineBytes)
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
