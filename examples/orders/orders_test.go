package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

func TestDecodeOrder(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Order
		wantErr string // substring of the error; "" for none
	}{
		{"valid", `{"order_id":"o-1","customer_id":"c-42","amount":12.5}`, Order{"o-1", "c-42", 12.5}, ""},
		{"unknown fields ignored", `{"order_id":"o-2","customer_id":"c-1","amount":0,"currency":"EUR"}`, Order{"o-2", "c-1", 0}, ""},
		{"no order id is fine", `{"customer_id":"c-1","amount":3}`, Order{"", "c-1", 3}, ""},
		{"no amount", `{"order_id":"o-3","customer_id":"c-1"}`, Order{}, `order "o-3" has no amount`},
		{"null amount", `{"order_id":"o-3","customer_id":"c-1","amount":null}`, Order{}, "has no amount"},
		{"negative amount", `{"order_id":"o-4","customer_id":"c-1","amount":-1}`, Order{}, `order "o-4" amount -1 is negative`},
		{"huge amount", `{"order_id":"o-5","customer_id":"c-1","amount":1e13}`, Order{}, "is above 1e+12"},
		{"amount overflows", `{"order_id":"o-6","customer_id":"c-1","amount":1e400}`, Order{}, "not a JSON order object"},
		{"amount is a string", `{"order_id":"o-7","customer_id":"c-1","amount":"12"}`, Order{}, "not a JSON order object"},
		{"broken JSON", `{"order_id":"o-8","customer_id":"c-1","amount":`, Order{}, "not a JSON order object"},
		{"not an object", `[1,2]`, Order{}, "not a JSON order object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeOrder(context.Background(), []byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadOrder) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("decodeOrder(%s) error = %v, want an ErrBadOrder containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("decodeOrder(%s) = %+v, %v; want %+v, nil", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestCustomerOf(t *testing.T) {
	tests := []struct {
		name    string
		id      string
		wantErr string
	}{
		{"valid", "c-42", ""},
		{"unicode", "client-é", ""},
		{"longest", strings.Repeat("x", engine.MaxKeyBytes), ""},
		{"missing", "", "has no customer_id"},
		{"too long", strings.Repeat("x", engine.MaxKeyBytes+1), "customer_id has 1025 bytes, at most 1024"},
		{"not UTF-8", "c-\xff", "not UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := customerOf(Order{OrderID: "o-1", CustomerID: tt.id})
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadOrder) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("customerOf(%q) error = %v, want an ErrBadOrder containing %q", tt.id, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.id {
				t.Fatalf("customerOf(%q) = %q, %v; want %q, nil", tt.id, got, err, tt.id)
			}
		})
	}
}

func TestTotalsAdd(t *testing.T) {
	tests := []struct {
		name    string
		amounts []float64
		want    Totals
	}{
		{"none", nil, Totals{}},
		{"one", []float64{12.5}, Totals{Count: 1, Total: 12.5, Max: 12.5}},
		{"max not last", []float64{3, 20, 0.25}, Totals{Count: 3, Total: 23.25, Max: 20}},
		{"zero amounts", []float64{0, 0}, Totals{Count: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Totals
			for _, a := range tt.amounts {
				got.add(Order{CustomerID: "c-1", Amount: a})
			}
			if got != tt.want {
				t.Fatalf("after %v: got %+v, want %+v", tt.amounts, got, tt.want)
			}
		})
	}
}

func TestCustomersJobIsValid(t *testing.T) {
	j := CustomersJob()
	if err := j.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if _, err := app.NewJob(j, "orders", "customer-totals"); err != nil {
		t.Fatalf("app.NewJob: %v", err)
	}
	spec := j.Spec()
	if spec.Name != CustomersTable || len(spec.Indexes) != 1 || spec.Indexes[0] != (engine.IndexSpec{Name: "total", Kind: engine.IndexNumber}) {
		t.Fatalf("spec = %+v, want table %s with one number index total", spec, CustomersTable)
	}
	got := string(appendTotalsJSON([]byte("x"), Totals{Count: 2, Total: 40.5, Max: 30}))
	if want := `x{"count":2,"total":40.5,"max":30}`; got != want {
		t.Fatalf("output = %s, want %s", got, want)
	}
}

func TestGeneratorIsReproducible(t *testing.T) {
	a, b := newGenerator(50, 7, 10), newGenerator(50, 7, 10)
	bad := 0
	for i := range 1000 {
		x, y := a.next(), b.next()
		if !bytes.Equal(x.value, y.value) || !bytes.Equal(x.key, y.key) {
			t.Fatalf("record %d differs: %s / %s", i, x.value, y.value)
		}
		o, err := decodeOrder(context.Background(), x.value)
		if err == nil {
			_, err = customerOf(o)
		}
		if x.valid != (err == nil) {
			t.Fatalf("record %d %s: valid %v but the job says %v", i, x.value, x.valid, err)
		}
		if x.valid && o != x.order {
			t.Fatalf("record %d: decoded %+v, generated %+v", i, o, x.order)
		}
		if !x.valid {
			bad++
		}
	}
	if bad != 100 {
		t.Fatalf("%d bad records of 1000 with --bad-every 10, want 100", bad)
	}
}

func TestRawLines(t *testing.T) {
	in := "{\"order_id\":\"o-1\",\"customer_id\":\"c-1\",\"amount\":2}\n\n  \nnot json\n{\"amount\":1}\n"
	next := rawLines(strings.NewReader(in))
	want := []struct{ key, value string }{
		{"c-1", `{"order_id":"o-1","customer_id":"c-1","amount":2}`},
		{"", "not json"},
		{"", `{"amount":1}`},
	}
	for i, w := range want {
		g, ok, err := next()
		if err != nil || !ok || string(g.key) != w.key || string(g.value) != w.value {
			t.Fatalf("line %d: got key %q value %q ok %v err %v; want key %q value %q", i, g.key, g.value, ok, err, w.key, w.value)
		}
	}
	if _, ok, err := next(); ok || err != nil {
		t.Fatalf("after the last line: ok %v err %v, want false, nil", ok, err)
	}
}

func TestCommandLine(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		wantOut  string // substring of stdout+stderr
	}{
		{"help", []string{"help"}, nil, 0, "orders produce"},
		{"run -h", []string{"run", "-h"}, nil, 0, "-input-topic"},
		{"-h is the usage", []string{"-h"}, nil, 0, "orders [run] [flags]"},
		{"flags without a command mean run", []string{"--store", "nope"}, nil, 2, `orders run: invalid configuration`},
		{"unknown command", []string{"frobnicate"}, nil, 2, `unknown command "frobnicate"`},
		{"bad flag", []string{"run", "--no-such-flag"}, nil, 2, "no-such-flag"},
		{"bad config", []string{"run", "--store", "nope"}, nil, 2, `unknown store "nope"`},
		{"env is read", []string{"run"}, map[string]string{"KEEPSTATE_COMMIT_INTERVAL": "0s"}, 2, "--commit-interval: must be positive"},
		{"produce -h", []string{"produce", "-h"}, nil, 0, "-customers"},
		{"produce bad counts", []string{"produce", "--customers", "0"}, nil, 2, "--customers > 0"},
		{"produce extra args", []string{"produce", "extra"}, nil, 2, "unexpected arguments"},
		{"reset -h", []string{"reset", "-h"}, nil, 0, "-reprocess"},
		{"reset bad config", []string{"reset", "--store", "nope"}, nil, 2, `unknown store "nope"`},
		{"reset without a broker", []string{"reset", "--brokers", "127.0.0.1:1"}, nil, 2, "start Kafka or set --brokers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out bytes.Buffer
			code := run(context.Background(), tt.args, strings.NewReader(""), &out, &out)
			if code != tt.wantCode || !strings.Contains(out.String(), tt.wantOut) {
				t.Fatalf("orders %v: exit %d, output:\n%s\nwant exit %d and output containing %q", tt.args, code, out.String(), tt.wantCode, tt.wantOut)
			}
		})
	}
}

// TestCustomersExact runs the job in-process (app.RunJobs) on a broker
// (kfake unless KEEPSTATE_TEST_KAFKA=real), sends orders with bad ones
// among them, and checks every output: each customer's document, the index
// query for totals of at least 1000 (paged), the last changelog and output
// record of each customer, and the dead letters with their reasons.
func TestCustomersExact(t *testing.T) {
	brokers := testkit.Kafka(t)
	c := testConfig(t, brokers)
	job, err := app.NewJob(CustomersJob(), c.InputTopic, c.OutputTopic)
	if err != nil {
		t.Fatalf("NewJob: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- app.RunJobs(ctx, c, testkit.Logger(t, "orders"), func(a string) { addr <- a }, job) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("RunJobs ended with: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("RunJobs did not stop within 60s")
		}
	})
	var api string
	select {
	case api = <-addr:
	case err := <-done:
		t.Fatalf("RunJobs ended before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("RunJobs did not listen within 30s")
	}
	testkit.Eventually(t, 60*time.Second, "ready", func() error {
		if code, err := testkit.GetJSON("http://"+api+"/readyz", nil); err != nil || code != http.StatusOK {
			return errors.New("not ready")
		}
		return nil
	})

	p := defaultProduce()
	p.Brokers, p.Topic = brokers, c.InputTopic
	p.Count, p.Customers, p.Seed, p.BadEvery = 6000, 300, 3, 250
	if n, err := produceOrders(context.Background(), p, nil); err != nil || n != p.Count {
		t.Fatalf("produce: sent %d of %d: %v", n, p.Count, err)
	}
	tr := newTruth()
	tr.addProduced(p)
	if n := len(tr.atLeast(1000)); n < 10 || n > len(tr.customers)-10 {
		t.Fatalf("%d of %d customers have a total >= 1000: the index query would not tell much", n, len(tr.customers))
	}

	t.Logf("%d orders: %d customers, %d with a total >= 1000, %d bad orders", p.Count, len(tr.customers), len(tr.atLeast(1000)), tr.bad)
	testkit.Eventually(t, 60*time.Second, "every customer exact", func() error { return checkCustomers([]string{api}, tr) })
	if err := checkIndex(api, tr); err != nil {
		t.Errorf("index: %v", err)
	}
	if code, err := testkit.GetJSON("http://"+api+"/tables/"+CustomersTable+"/no-such-customer", nil); err != nil || code != http.StatusNotFound {
		t.Errorf("GET an unknown customer: %d %v, want 404", code, err)
	}
	jc := c.JobConfig(nil, CustomersTable, c.InputTopic, c.OutputTopic)
	testkit.Eventually(t, 60*time.Second, "changelog exact", func() error { return checkLastTotals(brokers, jc.ChangelogTopic, tr) })
	testkit.Eventually(t, 60*time.Second, "output exact", func() error { return checkLastTotals(brokers, c.OutputTopic, tr) })
	testkit.Eventually(t, 60*time.Second, "dead letters", func() error { return checkDLQ(brokers, jc.DLQTopic, c.InputTopic, tr.bad) })
}
